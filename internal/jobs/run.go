package jobs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// keptHeaders are the response headers worth keeping with a result.
var keptHeaders = []string{"Content-Type", "Request-Id", "X-Request-Id", "Anthropic-Organization-Id", "Openai-Organization", "Openai-Processing-Ms"}

// maxResultBytes bounds a response body kept with a job.
const maxResultBytes = 64 << 20

// verdict is what one run decided for its job.
type verdict struct {
	complete *jobstore.Result // success
	fail     *jobstore.FailParams
	// outcome is the attempt's outcome if the store takes the verdict
	// as it is (a retry may still kill the job).
	outcome AttemptOutcome
	// costUSD is what the call was charged against its client's budget.
	costUSD float64
	// heldBy names the client limit that held the call back (AttemptHeld).
	heldBy string
}

// run executes one leased job with its admission ticket: one call with a
// heartbeat, then the verdict written with the lease's fencing token. The
// heartbeat goes on until the verdict is written: a worker holding a paid
// answer keeps its lease while it retries the write (see write).
func (w *worker) run(j *jobstore.Job, a admission) {
	s := w.s
	start := s.cfg.Clock.Now()
	s.cfg.Observer.Started(w.upstream, queueWait(j, start))
	outcome, v := AttemptStoreError, verdict{}
	spanCtx, span := w.startSpan(j, start)
	defer func() { w.report(j, a, span, start, outcome, v) }()
	ctx, cancel := context.WithCancelCause(spanCtx)
	defer cancel(nil)
	s.track(j.ID, cancel)
	defer s.untrack(j.ID)

	l := &lease{}
	l.renewed(cmp.Or(j.Lease.ExpiresAt, start.Add(s.cfg.LeaseFor)))
	defer w.goHeartbeat(ctx, j, l, cancel)()
	outcome, v = w.attempt(ctx, j, a, l)
}

// attempt makes j's one call under its running heartbeat, or takes the
// answer this process still holds for it, and writes the verdict; it
// returns the attempt's outcome and the verdict.
func (w *worker) attempt(ctx context.Context, j *jobstore.Job, a admission, l *lease) (AttemptOutcome, verdict) {
	// An answer this process still holds for the job (its first lease
	// ran out while the store was away and the spool could not take it)
	// is written with this lease instead of calling again.
	v, held, answered := w.s.answers.claimed(j.ID)
	switch {
	case answered:
		// Written after its lease was lost, while this claim was made.
		a.ticket.Release()
		return AttemptLeaseLost, v
	case held:
		a.ticket.Release()
	default:
		v = w.call(ctx, j, a)
	}

	// The store already moved a canceled job or a lost lease on: write
	// nothing.
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errJobCanceled):
		return AttemptCanceled, v
	case errors.Is(cause, errLeaseLost):
		return AttemptLeaseLost, v
	case errors.Is(cause, errShutdown):
		// A call cut off by this gateway's own shutdown is recorded but
		// burns nothing (like a call in flight at a crash): the lease goes
		// back so a restart runs the job at once.
		v = verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule,
			Error: jobstore.AttemptError{Kind: llm.Transient.String(), Message: "gateway stopped during the call; requeued"}},
			outcome: AttemptStopped}
	}
	outcome := w.write(ctx, j, v, l)
	if outcome == AttemptLeaseLost && errors.Is(context.Cause(ctx), errJobCanceled) {
		// Canceled here after the call returned: the store refused the
		// write because the job is canceled, not because a rescuer took it.
		outcome = AttemptCanceled
	}
	return outcome, v
}

// startSpan starts the span of j's attempt, begun at start.
func (w *worker) startSpan(j *jobstore.Job, start time.Time) (context.Context, trace.Span) {
	return w.s.cfg.Tracer.Start(w.jobCtx, "sluice.job_attempt", trace.WithTimestamp(start),
		trace.WithAttributes(attribute.Int64("sluice.job_id", j.ID), attribute.String("sluice.request_id", jobRequestID(j.ID)),
			attribute.String("sluice.upstream", w.upstream), attribute.String("sluice.client", j.Client),
			attribute.String("sluice.priority", j.Priority.String()), attribute.Int("sluice.attempt", j.Attempts+1),
			attribute.String("sluice.batch_id", j.BatchID)))
}

// report tells of j's attempt begun at start once it ended with outcome
// and verdict v: the Observer's Attempted, the log line, the span's end.
func (w *worker) report(j *jobstore.Job, a admission, span trace.Span, start time.Time, outcome AttemptOutcome, v verdict) {
	now := w.s.cfg.Clock.Now()
	d := now.Sub(start)
	w.s.cfg.Observer.Attempted(w.upstream, outcome, d)
	servedBy := cmp.Or(a.via.upstream, w.upstream)
	w.logAttempt(j, outcome, v, queueWait(j, start), d, servedBy)
	span.SetAttributes(attribute.String("sluice.outcome", string(outcome)), attribute.String("sluice.served_by", servedBy))
	if outcome != AttemptSuccess {
		span.SetStatus(codes.Error, string(outcome))
	}
	span.End(trace.WithTimestamp(now))
}

// goHeartbeat starts renewing j's lease (heartbeat) and returns the
// function that stops the heartbeat and waits for it to end.
func (w *worker) goHeartbeat(ctx context.Context, j *jobstore.Job, l *lease, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	stopC := make(chan struct{})
	go func() {
		defer close(done)
		w.heartbeat(ctx, j, l, cancel, stopC)
	}()
	return func() {
		close(stopC)
		<-done
	}
}

// logAttempt writes the one line of a finished attempt (msg "job
// attempt"; the fields are listed in docs/observability.md, "Logs"). It runs
// after the verdict is written and holds no lock: O(1), off the hot path.
func (w *worker) logAttempt(j *jobstore.Job, outcome AttemptOutcome, v verdict, queued, d time.Duration, servedBy string) {
	log := w.s.cfg.Logger
	ctx := context.Background()
	if outcome == AttemptHeld {
		// Nothing was sent: no attempt to log (and never a rate limit).
		if log.Enabled(ctx, slog.LevelDebug) {
			reason := cmp.Or(v.heldBy, v.fail.Error.Message, "the quota had no room for its cost now")
			log.LogAttrs(ctx, slog.LevelDebug, "job held", slog.Int64("job_id", j.ID), slog.String("upstream", w.upstream),
				slog.String("client", j.Client), slog.String("reason", reason), slog.Time("retry_at", v.fail.RetryAt))
		}
		return
	}
	if !log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var status int
	var usage llm.Usage
	switch {
	case v.complete != nil:
		status, usage = v.complete.Status, v.complete.Usage
	case v.fail != nil:
		status = v.fail.Error.Status
	}
	log.LogAttrs(ctx, slog.LevelInfo, "job attempt",
		slog.String("request_id", jobRequestID(j.ID)),
		slog.Int64("job_id", j.ID),
		slog.String("batch_id", j.BatchID),
		slog.String("upstream", w.upstream),
		slog.String("served_by", servedBy),
		slog.String("client", j.Client),
		slog.String("priority", j.Priority.String()),
		slog.String("outcome", string(outcome)),
		slog.Int("status", status),
		slog.Int("attempt", j.Attempts+1),
		slog.Int64("queue_ms", queued.Milliseconds()),
		slog.Int64("duration_ms", d.Milliseconds()),
		slog.Int64("tokens_in", usage.InputTokens),
		slog.Int64("tokens_out", usage.OutputTokens),
		slog.Any("cost_usd", admit.USD(v.costUSD)),
	)
}

// lease is what a running job's worker knows of its lease: until when the
// store last agreed to hold it. Safe for concurrent use.
type lease struct {
	mu    sync.Mutex
	until time.Time
}

func (l *lease) renewed(until time.Time) {
	l.mu.Lock()
	l.until = until
	l.mu.Unlock()
}

// trustedUntil is when the lease runs out unless renewed.
func (l *lease) trustedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// queueWait is how long j waited to start at now since it became available.
func queueWait(j *jobstore.Job, now time.Time) time.Duration {
	from := j.AvailableAt
	if from.IsZero() {
		from = j.CreatedAt
	}
	return max(now.Sub(from), 0)
}

// heartbeat renews j's lease until stop. A lost lease (ErrLeaseLost,
// ErrNotFound) aborts the call; a store that cannot answer is no lost
// lease: the heartbeat keeps trying, and l tells the result write how long
// the lease can still be trusted.
func (w *worker) heartbeat(ctx context.Context, j *jobstore.Job, l *lease, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	cfg := w.s.cfg
	t := cfg.Clock.NewTimer(cfg.HeartbeatEvery)
	defer t.Stop()
	// The result write may outlive ctx (a shutdown keeps a held answer
	// until it is written or spooled): renew on a context of its own.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	go func() {
		select {
		case <-stop:
		case <-hctx.Done():
		}
		hcancel()
	}()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		now := cfg.Clock.Now()
		err := w.s.store.Heartbeat(hctx, jobstore.HeartbeatParams{ID: j.ID, Token: j.Lease.Token, LeaseFor: cfg.LeaseFor, Now: now})
		switch {
		case err == nil:
			l.renewed(now.Add(cfg.LeaseFor))
		case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
			cancel(errLeaseLost)
			return
		case hctx.Err() == nil:
			cfg.Logger.Warn("renewing job lease", "job", j.ID, "err", err)
		}
		t.Reset(cfg.HeartbeatEvery)
	}
}

// call makes j's one upstream call with ticket t and reads the whole
// response; the request is built by the front door exactly as a live one,
// and the engine's outcome goes through dispatch.DecideFate, the one place
// that decides what a call means.
func (w *worker) call(ctx context.Context, j *jobstore.Job, a admission) verdict {
	t := a.ticket
	req, rerr := jobRequest(w.protocol, j, w.s.cfg.Clock.Now())
	if rerr != nil {
		t.Release()
		return w.fated(j, dispatch.Fate{Kind: dispatch.Terminal}, llm.Outcome{Kind: llm.ClientError, Status: http.StatusBadRequest,
			Message: "invalid request body: " + rerr.Message}, nil)
	}
	if a.via.upstream == "" {
		if fr := w.flexRequest(j, req, w.s.cfg.Clock.Now()); fr != nil {
			req = fr
		}
	}
	w.costs.remember(j.Priority, req.Cost)
	if a.via.upstream != "" {
		// A fallback serves the call: the job's model as it maps it.
		*req = a.via.target.Rewrite(*req)
	}
	// Admitted on the upstream that serves the call: its client's budget
	// at the price of the model it is sent as, its client's own limit
	// there.
	hold, err := w.admitCall(a.via, req)
	if err != nil {
		t.Release()
		return w.notAdmitted(err)
	}
	resp, err := t.Call(ctx, req)
	if err != nil {
		v := w.callFailure(j, err)
		v.costUSD = hold.Settle(dispatch.End{}, false)
		return v
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	// The engine read the stream as the upstream sent it (usage chunk
	// included); the result keeps what the caller asked for.
	frontdoor.PrepareResponse(req, resp)
	n, readErr := io.Copy(&body, io.LimitReader(resp.Body, maxResultBytes+1))
	if n > maxResultBytes {
		return w.fated(j, dispatch.Fate{Kind: dispatch.Terminal}, llm.Outcome{Kind: llm.ClientError, Status: resp.StatusCode,
			Message: fmt.Sprintf("response larger than %d bytes", maxResultBytes)}, nil)
	}
	_ = resp.Body.Close() // ends the call: the engine has read its usage and how it ended
	res := &jobstore.Result{Status: resp.StatusCode, Header: http.Header{}, Body: body.Bytes()}
	for _, h := range keptHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			res.Header[h] = v
		}
	}
	res.Header[servedByHeader] = []string{cmp.Or(a.via.upstream, w.upstream)}
	end, ended := resp.End()
	costUSD := hold.Settle(end, ended)
	if costUSD > 0 {
		res.Header[CostHeader] = []string{strconv.FormatFloat(costUSD, 'f', -1, 64)}
	}
	out := end.Outcome
	if readErr != nil && out.Kind == llm.Success {
		out = llm.Outcome{Kind: llm.Transient, Status: resp.StatusCode, Message: "reading the upstream response: " + readErr.Error()}
	}
	if out.Kind == llm.Success {
		res.Usage = end.Usage
		return verdict{complete: res, outcome: AttemptSuccess, costUSD: costUSD}
	}
	out.Status = cmp.Or(out.Status, resp.StatusCode)
	v := w.fated(j, w.fate(j, true, out, 0), out, res)
	v.costUSD = costUSD
	return v
}

// callFailure turns an error from Ticket.Call into a verdict.
func (w *worker) callFailure(j *jobstore.Job, err error) verdict {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		// ctx canceled (cancel, lost lease, shutdown: run decides) or a
		// local failure: count it as a transient call so it cannot loop.
		out := llm.Outcome{Kind: llm.Transient, Message: err.Error()}
		return w.fated(j, w.fate(j, true, out, 0), out, nil)
	}
	if errors.Is(de, dispatch.ErrTooLarge) {
		out := llm.Outcome{Kind: llm.ClientError, Status: de.Status, Message: de.Message}
		return w.fated(j, dispatch.Fate{Kind: dispatch.Terminal}, out, nil)
	}
	out, sent := de.Outcome()
	if !sent {
		// Nothing reached the provider (the request's cost did not fit
		// now, or the dispatcher stopped): reschedule for when it would,
		// without an attempt or a history entry (the history lists calls).
		f := w.fate(j, false, out, de.RetryAfter)
		v := verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, RetryAt: f.At}, outcome: AttemptHeld}
		if errors.Is(de, dispatch.ErrStopped) {
			v.outcome = AttemptStopped
		}
		return v
	}
	return w.fated(j, w.fate(j, true, out, 0), out, nil)
}

// fate decides j's fate after a call (sent) or a hand-back (not sent,
// available again after wait).
func (w *worker) fate(j *jobstore.Job, sent bool, out llm.Outcome, wait time.Duration) dispatch.Fate {
	hintless := 0
	for _, e := range j.Errors {
		if e.Kind == llm.Rate.String() && e.Status != 0 && e.RetryAfter == 0 {
			hintless++
		}
	}
	return dispatch.DecideFate(dispatch.FateParams{Sent: sent, Wait: wait, Outcome: out, Burnt: j.Attempts,
		HintlessRates: hintless, Backoff: w.s.backoff, Now: w.s.cfg.Clock.Now(), U: w.s.uniform()})
}

// fated turns a fate into the store write: Retry burns an attempt and
// requeues at the fate's time, Reschedule requeues without burning,
// Terminal kills the job keeping res (the provider's error response).
func (w *worker) fated(_ *jobstore.Job, f dispatch.Fate, out llm.Outcome, res *jobstore.Result) verdict {
	e := jobstore.AttemptError{Status: out.Status, Kind: out.Kind.String(), Message: out.Message}
	if out.HasRetryAfter {
		e.RetryAfter = out.RetryAfter
	}
	switch f.Kind {
	case dispatch.Reschedule:
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: e, RetryAt: f.At}, outcome: AttemptRateLimited}
	case dispatch.Retry:
		o := AttemptRetry
		if out.Kind == llm.Rate {
			o = AttemptRateLimited
		}
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailRetry, Error: e, RetryAt: f.At}, outcome: o}
	default: // Terminal (Succeed never comes here)
		if res != nil && res.Status >= 200 && res.Status < 300 {
			res = nil // a 2xx that failed mid-stream is no error response to keep
		}
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e, Result: res}, outcome: AttemptDead}
	}
}

// Result-write retry backoff: the first wait, doubling up to the cap.
const (
	writeRetryFirst = 100 * time.Millisecond
	writeRetryMax   = 5 * time.Second
)

// write records v with the job's fencing token and returns the attempt's
// outcome. A lost lease means another worker (or a cancel) owns the job
// now: nothing is overwritten (but a success is still offered through
// CompleteSpooled, which takes it only if the job is live: a rescued job
// need not be called again). A success or a terminal failure the store
// cannot take goes to the spool at once (before the first write while
// the store is known to be away), so that a crash from then on cannot
// lose it; the worker keeps the entry as its own and goes on writing with
// backoff on the clock while the lease can be trusted (the heartbeat keeps
// renewing it), and removes it once the store took the answer. Past that
// point, or when the service stops, the entry goes to the write-back
// before any claim. When the spool cannot take the answer it is held in
// memory (heldAnswers) and retried until the service stops.
func (w *worker) write(ctx context.Context, j *jobstore.Job, v verdict, l *lease) AttemptOutcome {
	s := w.s
	cfg := s.cfg
	wait := writeRetryFirst
	holding := false
	spooled := "" // the spool entry this worker owns, holding v
	triedSpool := keepable(v) && s.storeAway.Load()
	if triedSpool {
		spooled = w.spoolFirst(j, v, errStoreAway)
	}
	// settle ends the spool entry's ownership: the store has the answer
	// (or refuses it for good), or the write-back is to apply it.
	settle := func(kept bool) {
		switch {
		case spooled == "":
		case kept:
			s.spool.release(spooled)
		default:
			if err := s.spool.remove(spooled); err != nil {
				// Written back again later, the store's state stands.
				cfg.Logger.Error("removing a job result's spool entry", "job", j.ID, "err", err)
				s.spool.release(spooled)
			}
		}
		spooled = ""
	}
	defer func() { settle(true) }() // no path leaves an entry owned
	for tries := 1; ; tries++ {
		st, err := w.writeOnce(j, v)
		switch {
		case err == nil:
			s.storeAway.Store(false)
			settle(false)
			return w.recorded(j, v, st)
		case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
			if v.complete == nil || errors.Is(context.Cause(ctx), errJobCanceled) {
				settle(false)
				return AttemptLeaseLost
			}
			// The rescuer requeued the job while the store could not hear
			// the heartbeats: offer the answer through CompleteSpooled,
			// which takes it while the job is live, so that no claim here
			// starts the job's call meanwhile.
			taken, cerr := s.answers.completeLost(j.ID, j.Lease.Token, holding, cfg.Clock.Now(), cfg.LeaseFor,
				func() error { return w.completeSpooled(j, v) })
			switch {
			case taken:
				return AttemptLeaseLost // a claim here writes the answer
			case cerr == nil:
				settle(false)
				return w.recorded(j, v, jobstore.StateSucceeded)
			case spooled != "" && errors.Is(cerr, jobstore.ErrUnavailable):
				settle(true) // the write-back completes it once the store answers
				return AttemptStoreError
			case !holding || !errors.Is(cerr, jobstore.ErrUnavailable):
				settle(false)
				return AttemptLeaseLost
			}
			err = cerr // the store went away again: keep holding
		}
		if errors.Is(err, jobstore.ErrUnavailable) {
			s.storeAway.Store(true)
		}
		if !triedSpool && keepable(v) {
			// Kept on disk before anything else, so a crash while the
			// store is away cannot lose a paid answer.
			triedSpool = true
			spooled = w.spoolFirst(j, v, err)
		}
		now := cfg.Clock.Now()
		stopping := w.jobCtx.Err() != nil || s.stopping.Err() != nil
		// Trust the lease only while one more heartbeat could renew it
		// before it runs out (the rescuer goes by the store's copy).
		trusted := now.Add(wait).Before(l.trustedUntil().Add(-cfg.HeartbeatEvery))
		if stopping || !trusted {
			if !keepable(v) {
				// A retry or reschedule: the job is called again anyway.
				cfg.Logger.Warn("recording job result", "job", j.ID, "err", err)
				return AttemptStoreError
			}
			if spooled != "" {
				settle(true) // the write-back applies it before any claim
				cfg.Logger.Warn("kept a job result in the spool until the store answers", "job", j.ID, "err", err)
				return AttemptStoreError
			}
			if w.spoolResult(j, v, err) {
				return AttemptStoreError
			}
			if stopping {
				cfg.Logger.Error("dropping a job result the store could not take: the job will be called again",
					"job", j.ID, "err", err)
				return AttemptStoreError
			}
			// The spool cannot take it (full, on the full disk, or none):
			// hold it here and go on retrying. A claim of the job in this
			// process (after a rescue) takes the answer instead of calling.
			if !holding {
				holding = true
				s.answers.hold(j.ID, j.Lease.Token, v)
				defer s.answers.unhold(j.ID, j.Lease.Token)
			}
		}
		if tries == 1 {
			cfg.Logger.Warn("recording job result; retrying while the lease holds", "job", j.ID, "err", err, "spooled", spooled != "")
		}
		t := cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-w.jobCtx.Done():
		case <-s.stopping.Done(): // one last try, then the spool
		}
		t.Stop()
		wait = min(2*wait, writeRetryMax)
	}
}

// errStoreAway is why an answer is spooled before its first write: the
// store failed the last write this service made.
var errStoreAway = errors.New("the job store failed the last result write")

// spoolFirst writes v to the spool as an entry this worker owns, after
// the store failed with cause, and returns its name ("": the spool could
// not take it; the answer stays in memory).
func (w *worker) spoolFirst(j *jobstore.Job, v verdict, cause error) string {
	s := w.s
	if s.spool == nil {
		return ""
	}
	name, err := s.spool.putOwned(w.spoolEntry(j, v))
	if err != nil {
		s.cfg.Logger.Warn("spooling a job result the store could not take: it is held in memory", "job", j.ID, "err", err, "store_err", cause)
		return ""
	}
	return name
}

// keepable reports whether v is worth keeping past its lease: a success
// or a terminal failure (a retry or reschedule calls the job again in any
// case).
func keepable(v verdict) bool {
	return v.complete != nil || (v.fail != nil && v.fail.Kind == jobstore.FailTerminal)
}

// writeOnce makes one attempt at the store write of v.
func (w *worker) writeOnce(j *jobstore.Job, v verdict) (jobstore.State, error) {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	if v.complete != nil {
		return jobstore.StateSucceeded, s.store.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: *v.complete, Now: now})
	}
	p := *v.fail
	p.ID, p.Token, p.Now = j.ID, j.Lease.Token, now
	return s.store.Fail(ctx, p)
}

// completeSpooled writes a success whose lease was lost through
// CompleteSpooled.
func (w *worker) completeSpooled(j *jobstore.Job, v verdict) error {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	return s.store.CompleteSpooled(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: *v.complete, Now: s.cfg.Clock.Now()})
}

// spoolResult keeps v in the spool after the store failed with cause, and
// reports whether it did.
func (w *worker) spoolResult(j *jobstore.Job, v verdict, cause error) bool {
	s := w.s
	if s.spool == nil {
		return false
	}
	if err := s.spool.put(w.spoolEntry(j, v)); err != nil {
		s.cfg.Logger.Warn("spooling a job result the store could not take", "job", j.ID, "err", err, "store_err", cause)
		return false
	}
	s.cfg.Logger.Warn("kept a job result in the spool until the store answers", "job", j.ID, "err", cause)
	return true
}

// spoolEntry is v's spool entry, under j's lease.
func (w *worker) spoolEntry(j *jobstore.Job, v verdict) spoolEntry {
	return spoolEntry{JobID: j.ID, Token: j.Lease.Token, Upstream: w.upstream, WebhookURL: j.WebhookURL, BodySHA256: bodyHash(j.Body),
		Complete: v.complete, Fail: v.fail, SpooledAt: w.s.cfg.Clock.Now()}
}

// recorded accounts for v written in state st.
func (w *worker) recorded(j *jobstore.Job, v verdict, st jobstore.State) AttemptOutcome {
	if !st.Finished() {
		return v.outcome
	}
	w.s.finishedHere(w.upstream, j.WebhookURL, st)
	if st == jobstore.StateDead {
		return AttemptDead // a retry or reschedule past the job's attempts or deadline
	}
	return v.outcome
}

// finishedHere announces a job this process finished: metrics, long
// polls, its webhook.
func (s *Service) finishedHere(upstream, webhookURL string, st jobstore.State) {
	s.cfg.Observer.Finished(upstream, st, 1)
	s.announce()
	if webhookURL != "" {
		s.hooks.kick() // the store wrote its outbox row with the result
	}
}
