package jobs

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

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
	// upstream names the upstream the attempt went to ("" when no call
	// was made: an answer this process held).
	upstream string
}

// on returns v as the verdict of an attempt on upstream: its history
// entry, if it has one, names it.
func (v verdict) on(upstream string) verdict {
	v.upstream = upstream
	if v.fail != nil && !v.fail.Error.Unrecorded() {
		v.fail.Error.Upstream = upstream
	}
	return v
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
			outcome: AttemptStopped}.on(v.upstream)
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
	v.outcome = outcome
	v.upstream = cmp.Or(v.upstream, w.servedBy(a.via))
	w.logAttempt(j, v, queueWait(j, start), d)
	servedBy := v.upstream
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

// logAttempt writes the one line of a finished attempt ending in v with
// v.outcome (msg "job attempt"; the fields are listed in
// docs/observability.md, "Logs"). It runs after the verdict is written
// and holds no lock: O(1), off the hot path.
func (w *worker) logAttempt(j *jobstore.Job, v verdict, queued, d time.Duration) {
	outcome := v.outcome
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
		slog.String("served_by", cmp.Or(v.upstream, w.upstream)),
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
