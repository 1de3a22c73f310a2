package jobs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

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

// call makes j's call with admission a and reads the whole response; the
// request is built by the front door exactly as a live one, and the
// engine's outcome goes through dispatch.DecideFate, the one place that
// decides what a call means. An attempt that fails as an outage does, on
// an upstream with a fallback that can take the job now, is recorded and
// the call is made again at once there, under the same lease (fallBack):
// the rule a live request falls back by.
func (w *worker) call(ctx context.Context, j *jobstore.Job, a admission) verdict {
	base, rerr := jobRequest(w.protocol, j, w.s.cfg.Clock.Now())
	if rerr != nil {
		a.ticket.Release()
		return w.fated(dispatch.Fate{Kind: dispatch.Terminal}, llm.Outcome{Kind: llm.ClientError, Status: http.StatusBadRequest,
			Message: "invalid request body: " + rerr.Message}, nil).on(w.servedBy(a.via))
	}
	w.costs.remember(j.Priority, base.Cost)
	for {
		start := w.s.cfg.Clock.Now()
		v, err := w.callVia(ctx, j, a, base)
		next, ok := w.fallBack(ctx, j, a, base, v, err, start)
		if !ok {
			return v
		}
		a = next
	}
}

// callVia makes j's one attempt with admission a: base as a's upstream
// takes it (requestFor), admitted there by the admission layer (its
// client's budget at the price of the model it is sent as, its client's
// own limit there). It returns the attempt's verdict, naming that
// upstream, and the engine's error when the call failed without an answer.
func (w *worker) callVia(ctx context.Context, j *jobstore.Job, a admission, base *dispatch.Request) (verdict, error) {
	upstream := w.servedBy(a.via)
	req := w.requestFor(j, a.via, base)
	hold, err := w.admitCall(a.via, req)
	if err != nil {
		a.ticket.Release()
		return w.notAdmitted(err).on(upstream), nil
	}
	resp, err := a.ticket.Call(ctx, req)
	if err != nil {
		v := w.callFailure(j, err)
		v.costUSD = hold.Settle(dispatch.End{}, false)
		return v.on(upstream), err
	}
	return w.answer(j, upstream, req, resp, hold).on(upstream), nil
}

// requestFor is base as the upstream of via takes it: on a fallback the
// job's model as it maps it; on the job's own upstream in the flex tier
// when the rule allows it (flex.go).
func (w *worker) requestFor(j *jobstore.Job, via route, base *dispatch.Request) *dispatch.Request {
	if via.upstream != "" {
		req := via.target.Rewrite(*base)
		return &req
	}
	if fr := w.flexRequest(j, base, w.s.cfg.Clock.Now()); fr != nil {
		return fr
	}
	req := *base
	return &req
}

// answer reads the whole response of j's call to upstream, settles the
// call's admission and returns the verdict: the result kept (with the
// headers worth keeping, who served it and what it cost) or the failure
// it is.
func (w *worker) answer(j *jobstore.Job, upstream string, req *dispatch.Request, resp *dispatch.Response, hold admit.Settler) verdict {
	defer resp.Body.Close()
	var body bytes.Buffer
	// The engine read the stream as the upstream sent it (usage chunk
	// included); the result keeps what the caller asked for.
	frontdoor.PrepareResponse(req, resp)
	n, readErr := io.Copy(&body, io.LimitReader(resp.Body, maxResultBytes+1))
	_ = resp.Body.Close() // ends the call: the engine has read its usage and how it ended
	end, ended := resp.End()
	costUSD := hold.Settle(end, ended)
	if n > maxResultBytes {
		v := w.fated(dispatch.Fate{Kind: dispatch.Terminal}, llm.Outcome{Kind: llm.ClientError, Status: resp.StatusCode,
			Message: fmt.Sprintf("response larger than %d bytes", maxResultBytes)}, nil)
		v.costUSD = costUSD
		return v
	}
	res := &jobstore.Result{Status: resp.StatusCode, Header: http.Header{}, Body: body.Bytes()}
	for _, h := range keptHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			res.Header[h] = v
		}
	}
	res.Header[servedByHeader] = []string{upstream}
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
	v := w.fated(w.fate(j, true, out, 0), out, res)
	v.costUSD = costUSD
	return v
}

// fallBack decides, once j's attempt with a ended in v (err: the engine's
// error, nil when it answered), whether the call is made again at once on
// a fallback. It is when the attempt failed as an outage does and would be
// retried after backoff with an attempt left, and the admission layer
// names a fallback that can take the job now (Reroute): the attempt is
// recorded (it burns and joins the history, naming its upstream) and
// logged, and an admission on the fallback is waited for under the job's
// lease (bounded by the job's deadline), as a live request waits in the
// fallback's queue. It returns that admission; false leaves v the job's
// verdict (so does a store that cannot record the attempt now).
func (w *worker) fallBack(ctx context.Context, j *jobstore.Job, a admission, base *dispatch.Request, v verdict, err error,
	start time.Time) (admission, bool) {
	ad := w.s.cfg.Admission
	if ad == nil || err == nil || v.fail == nil || v.fail.Kind != jobstore.FailRetry || j.Attempts+1 >= j.MaxAttempts || ctx.Err() != nil {
		return admission{}, false
	}
	t, ok := ad.Reroute(a.via.target, j.Priority, jobsClient, base.Cost, j.Deadline, err)
	if !ok {
		return admission{}, false
	}
	via := w.routeTo(t)
	if via.upstream == "" {
		return admission{}, false // no engine for it here
	}
	ticket, err := via.dispatcher.Acquire(ctx, dispatch.AcquireParams{Priority: j.Priority, Client: jobsClient,
		Cost: t.Rewrite(*base).Cost, Deadline: j.Deadline})
	if err != nil {
		return admission{}, false
	}
	if err := w.recordAttempt(j, v.fail.Error); err != nil {
		ticket.Release()
		return admission{}, false
	}
	now := w.s.cfg.Clock.Now()
	v.outcome = AttemptFellBack
	w.s.cfg.Observer.Attempted(w.upstream, AttemptFellBack, now.Sub(start))
	w.logAttempt(j, v, queueWait(j, start), now.Sub(start))
	j.Attempts++
	e := v.fail.Error
	e.Attempt = j.Attempts
	j.Errors = append(j.Errors, e)
	return admission{ticket: ticket, via: via}, true
}

// recordAttempt records e, a failed attempt of j, while its lease goes on.
func (w *worker) recordAttempt(j *jobstore.Job, e jobstore.AttemptError) error {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	err := s.store.RecordAttempt(ctx, jobstore.RecordAttemptParams{ID: j.ID, Token: j.Lease.Token, Error: e, Now: s.cfg.Clock.Now()})
	if err != nil && !errors.Is(err, jobstore.ErrConflict) {
		s.cfg.Logger.Warn("recording a job's attempt before its fallback", "job", j.ID, "err", err)
	}
	return err
}

// callFailure turns an error from Ticket.Call into a verdict.
func (w *worker) callFailure(j *jobstore.Job, err error) verdict {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		// ctx canceled (cancel, lost lease, shutdown: run decides) or a
		// local failure: count it as a transient call so it cannot loop.
		out := llm.Outcome{Kind: llm.Transient, Message: err.Error()}
		return w.fated(w.fate(j, true, out, 0), out, nil)
	}
	if errors.Is(de, dispatch.ErrTooLarge) {
		out := llm.Outcome{Kind: llm.ClientError, Status: de.Status, Message: de.Message}
		return w.fated(dispatch.Fate{Kind: dispatch.Terminal}, out, nil)
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
	return w.fated(w.fate(j, true, out, 0), out, nil)
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
func (w *worker) fated(f dispatch.Fate, out llm.Outcome, res *jobstore.Result) verdict {
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
