package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
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
}

// run executes one leased job: dispatch with a heartbeat, then write the
// verdict with the lease's fencing token.
func (w *worker) run(j *jobstore.Job) {
	s := w.s
	obs := s.cfg.Observer
	start := s.cfg.Clock.Now()
	obs.Started(w.upstream, queueWait(j, start))
	outcome := AttemptStoreError
	defer func() { obs.Attempted(w.upstream, outcome, s.cfg.Clock.Now().Sub(start)) }()
	ctx, cancel := context.WithCancelCause(w.jobCtx)
	defer cancel(nil)
	s.track(j.ID, cancel)
	defer s.untrack(j.ID)

	hbDone := make(chan struct{})
	hbStop := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(ctx, j, cancel, hbStop)
	}()
	v := w.call(ctx, j)
	close(hbStop)
	<-hbDone

	// The store already moved a canceled job or a lost lease on: write
	// nothing.
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errJobCanceled):
		outcome = AttemptCanceled
		return
	case errors.Is(cause, errLeaseLost):
		outcome = AttemptLeaseLost
		return
	case errors.Is(cause, errShutdown):
		// Hand the lease back so a restart runs the job at once.
		v = verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: jobstore.AttemptError{Message: "gateway stopped during the call; requeued"}},
			outcome: AttemptStopped}
	}
	outcome = w.write(j, v)
	if outcome == AttemptLeaseLost && errors.Is(context.Cause(ctx), errJobCanceled) {
		// Canceled here after the call returned: the store refused the
		// write because the job is canceled, not because a rescuer took it.
		outcome = AttemptCanceled
	}
}

// queueWait is how long j waited to start at now since it became available.
func queueWait(j *jobstore.Job, now time.Time) time.Duration {
	from := j.AvailableAt
	if from.IsZero() {
		from = j.CreatedAt
	}
	return max(now.Sub(from), 0)
}

// heartbeat renews j's lease until stop; a lost lease aborts the call.
func (w *worker) heartbeat(ctx context.Context, j *jobstore.Job, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	cfg := w.s.cfg
	t := cfg.Clock.NewTimer(cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C():
		}
		err := w.s.store.Heartbeat(ctx, jobstore.HeartbeatParams{ID: j.ID, Token: j.Lease.Token, LeaseFor: cfg.LeaseFor, Now: cfg.Clock.Now()})
		switch {
		case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
			cancel(errLeaseLost)
			return
		case err != nil && ctx.Err() == nil:
			cfg.Logger.Warn("renewing job lease", "job", j.ID, "err", err)
		}
		t.Reset(cfg.HeartbeatEvery)
	}
}

// call sends j through the dispatcher and reads the whole response.
func (w *worker) call(ctx context.Context, j *jobstore.Job) verdict {
	req, rerr := jobRequest(w.protocol, j, w.s.cfg.Clock.Now())
	if rerr != nil {
		return terminal(http.StatusBadRequest, llm.ClientError, "invalid request body: "+rerr.Message, nil)
	}
	resp, err := w.dispatcher.Do(ctx, req)
	if err != nil {
		return w.dispatchFailure(j, err)
	}
	defer resp.Body.Close()
	var so *provider.StreamObserver
	var body bytes.Buffer
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The observer reads the stream as the upstream sent it (with the
		// usage chunk the front door asked for); the result keeps what the
		// caller asked for.
		so = provider.NewStreamObserver(w.protocol)
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(resp.Body, so), resp.Body}
	}
	frontdoor.PrepareResponse(req, resp)
	n, err := io.Copy(&body, io.LimitReader(resp.Body, maxResultBytes+1))
	if err != nil {
		return retry(w.s, j, 0, llm.Transient, "reading the upstream response: "+err.Error(), 0)
	}
	if n > maxResultBytes {
		return terminal(resp.StatusCode, llm.ClientError, fmt.Sprintf("response larger than %d bytes", maxResultBytes), nil)
	}
	res := &jobstore.Result{Status: resp.StatusCode, Header: http.Header{}, Body: body.Bytes()}
	for _, h := range keptHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			res.Header[h] = v
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A terminal provider error the dispatcher passed through.
		out := provider.Classify(w.protocol, resp.StatusCode, resp.Header, res.Body, w.s.cfg.Clock.Now())
		switch kind := jobstore.FailKindFor(out.Kind); kind {
		case jobstore.FailTerminal:
			return terminal(resp.StatusCode, out.Kind, out.Message, res)
		default:
			return retry(w.s, j, resp.StatusCode, out.Kind, out.Message, out.RetryAfter)
		}
	}
	if so != nil {
		if out, bad := so.StreamError(); bad {
			return retry(w.s, j, resp.StatusCode, llm.StreamFail, "stream error: "+out.Message, 0)
		}
		if !so.Done() {
			return retry(w.s, j, resp.StatusCode, llm.StreamFail, "stream ended before its final event", 0)
		}
		res.Usage, _ = so.Usage()
	} else {
		res.Usage, _ = provider.ParseUsage(w.protocol, res.Body)
	}
	return verdict{complete: res, outcome: AttemptSuccess}
}

// dispatchFailure turns an error from Dispatcher.Do into a verdict.
func (w *worker) dispatchFailure(j *jobstore.Job, err error) verdict {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		// ctx canceled (cancel, lost lease, shutdown) or a local failure.
		return retry(w.s, j, 0, llm.Transient, err.Error(), 0)
	}
	last := llm.Transient
	status := 0
	if de.Last != nil {
		last, status = de.Last.Kind, de.Last.Status
	}
	switch {
	case errors.Is(de, dispatch.ErrStopped):
		v := reschedule(w.s, 0, llm.Transient, de.Message, 0)
		v.outcome = AttemptStopped
		return v
	case errors.Is(de, dispatch.ErrTooLarge):
		return terminal(de.Status, llm.ClientError, de.Message, nil)
	case errors.Is(de, dispatch.ErrShed), errors.Is(de, dispatch.ErrDeadline):
		// Waiting is not the job's fault: try again later without burning.
		return reschedule(w.s, de.Status, llm.Rate, de.Message, de.RetryAfter)
	}
	switch jobstore.FailKindFor(last) {
	case jobstore.FailReschedule:
		return reschedule(w.s, status, last, de.Message, de.RetryAfter)
	case jobstore.FailTerminal:
		return terminal(status, last, de.Message, nil)
	default: // jobstore.FailRetry: burn an attempt and back off.
		return retry(w.s, j, status, last, de.Message, de.RetryAfter)
	}
}

func terminal(status int, class llm.OutcomeKind, msg string, res *jobstore.Result) verdict {
	return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: jobstore.AttemptError{Status: status, Class: class, Message: msg}, Result: res},
		outcome: AttemptDead}
}

func reschedule(s *Service, status int, class llm.OutcomeKind, msg string, hint time.Duration) verdict {
	wait := max(hint, time.Second)
	return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: jobstore.AttemptError{Status: status, Class: class, Message: msg},
		RetryAt: s.cfg.Clock.Now().Add(s.backoff.RateDelay(wait, s.uniform()))}, outcome: AttemptRateLimited}
}

func retry(s *Service, j *jobstore.Job, status int, class llm.OutcomeKind, msg string, hint time.Duration) verdict {
	delay := max(s.backoff.Delay(j.Attempts, s.uniform()), hint)
	return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailRetry, Error: jobstore.AttemptError{Status: status, Class: class, Message: msg},
		RetryAt: s.cfg.Clock.Now().Add(delay)}, outcome: AttemptRetry}
}

// write records v with the job's fencing token and returns the attempt's
// outcome. A lost lease means another worker (or a cancel) owns the job
// now: nothing is overwritten.
func (w *worker) write(j *jobstore.Job, v verdict) AttemptOutcome {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	var err error
	st := jobstore.StateSucceeded
	if v.complete != nil {
		err = s.store.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: *v.complete, Now: now})
	} else {
		p := *v.fail
		p.ID, p.Token, p.Now = j.ID, j.Lease.Token, now
		st, err = s.store.Fail(ctx, p)
	}
	switch {
	case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
		return AttemptLeaseLost
	case err != nil:
		s.cfg.Logger.Warn("recording job result", "job", j.ID, "err", err)
		return AttemptStoreError
	}
	if !st.Finished() {
		return v.outcome
	}
	s.cfg.Observer.Finished(w.upstream, st, 1)
	s.announce()
	if j.WebhookURL != "" {
		s.webhook(j.ID)
	}
	if st == jobstore.StateDead {
		return AttemptDead // a retry or reschedule past the job's attempts or deadline
	}
	return v.outcome
}
