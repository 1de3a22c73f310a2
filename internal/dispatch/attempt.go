package dispatch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// attempt sends one admitted attempt and decides what follows: a response
// to return (retry false), an error to return, or a retry (w is back in
// the queue).
func (d *Dispatcher) attempt(ctx context.Context, w *waiter, g admission) (*Response, bool, error) {
	x, err := d.exchange(ctx, w, g)
	if err != nil || x.resp != nil {
		return x.resp, false, err
	}
	return d.retryOrFail(ctx, w, x, g)
}

// exchanged is what one upstream call returned.
type exchanged struct {
	// resp is a 2xx response whose body is being read: the slot is held
	// until it ends.
	resp *Response
	// out is a failed call's outcome; its slot is already released.
	out llm.Outcome
	// errResp is the provider's error answer (body buffered), when the
	// failure had one.
	errResp *http.Response
	// keyOut is set when the answer took its key out of the pool (or
	// came from a key already out) and another key can take the request:
	// it is placed again without burning an attempt.
	keyOut bool
}

// exchange makes exactly one upstream call for an admitted waiter and
// records what it tells about the upstream (quota headers, breaker, AIMD,
// limiter pauses). It is the one call path of the sync retry loop and of
// Ticket.Call. A local error (request not built, ctx canceled) releases
// the slot as neutral.
func (d *Dispatcher) exchange(ctx context.Context, w *waiter, g admission) (exchanged, error) {
	start := d.clk.Now()
	d.traceQueueWait(w, start, nil)
	ctx, span := d.startAttempt(ctx, w, g, start)
	x, err := d.exchangeTraced(ctx, w, g, start)
	d.endAttempt(span, x, err, d.clk.Now())
	return x, err
}

// exchangeTraced is exchange inside its attempt's span (ctx carries it).
func (d *Dispatcher) exchangeTraced(ctx context.Context, w *waiter, g admission, start time.Time) (exchanged, error) {
	w.queueWait += since(w.waitFrom, start)
	w.waitFrom = time.Time{}
	if !w.admittedOnce {
		w.admittedOnce = true
		d.obs.Admitted(w.item.Class, w.queueWait)
		d.budget.RecordRequest(start)
	}
	w.attempts++
	// The call's own context: the caller's cancel reaches it until a
	// stream is handed over, which then outlives its reader (a client
	// that leaves a stream: the engine reads on to the provider's usage,
	// trackedBody.drainAbandoned). The body's end releases it.
	callCtx, cancelCall := context.WithCancelCause(context.WithoutCancel(ctx))
	c := &callLink{caller: ctx, cancel: func() { cancelCall(nil) }}
	c.unlink = context.AfterFunc(ctx, func() {
		// Once detached, only Sluice's own cut (the gateway stopping)
		// still ends the call: a client that leaves does not. The cause
		// goes with it (the front door's stream body reads it).
		if cause := context.Cause(ctx); !c.detached.Load() || errors.Is(cause, ErrStopped) {
			cancelCall(cause)
		}
	})
	defer c.release()
	hreq, err := d.newUpstreamRequest(callCtx, w.req, g.key)
	if err != nil {
		d.release(w, g, flow.Neutral, w.cost)
		return exchanged{}, fmt.Errorf("building request for upstream %q: %w", d.cfg.Name, err)
	}
	// The provider's rate-limit headers describe its buckets as of this
	// request's arrival: Observe compares them with ours as of here.
	k := g.key
	k.requests.Add(1)
	// The report may not count attempts reserved before this one and
	// not answered yet (they may reach the provider after it): the raise
	// subtracts everything reserved since the oldest of them.
	sendAt := d.clk.Now()
	k.sending(w, sendAt)
	w.sentAt = sendAt
	mark := k.lim.Mark(sendAt).From(k.oldestUnanswered(w))
	var orgMark flow.Mark
	if k.org != nil {
		orgMark = k.org.lim.Mark(d.clk.Now())
	}
	resp, err := d.cfg.client(w.req).Do(hreq)
	k.answered(w)
	now := d.clk.Now()
	if err != nil {
		if ctx.Err() != nil {
			// The request may have reached the provider: it keeps its
			// request token; only the tokens of an answer never read are
			// refunded.
			d.release(w, g, flow.Neutral, tokensOnly(w.cost))
			return exchanged{}, fmt.Errorf("calling upstream %q: %w", d.cfg.Name, context.Cause(ctx))
		}
		out := provider.ClassifyTransportError(err)
		d.noteAnswer(k, out, false, g.keyProbe, now)
		d.obs.Attempted(out.Kind, 0, since(start, now))
		d.settle(w, g, out)
		return exchanged{out: out}, nil
	}
	rl := provider.ParseRateLimits(d.cfg.Protocol, resp.Header, now)
	var known [flow.NumDims]flow.BucketState
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		known = k.lim.State(now) // what the engine knew before this answer taught it
	}
	obs := observations(d.cfg.Protocol, rl)
	k.lim.Observe(obs, mark, now)
	if k.org != nil {
		// A key's headers describe the key's buckets: they may lower the
		// org's view, never raise it.
		k.org.lim.Clamp(obs, orgMark, now)
	}
	d.noteLimits(k, obs)

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		d.noteAnswer(k, llm.Outcome{Kind: llm.Success, Status: resp.StatusCode}, true, g.keyProbe, now)
		if provider.IsEventStream(resp.Header) {
			return d.stream(ctx, w, g, resp, start, c)
		}
		d.obs.Attempted(llm.Success, resp.StatusCode, since(start, now))
		return exchanged{resp: d.success(w, g, resp, nil, nil, c)}, nil
	}

	body, readErr := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	_ = resp.Body.Close()
	if readErr != nil && ctx.Err() != nil {
		d.release(w, g, flow.Neutral, tokensOnly(w.cost)) // it reached the provider
		return exchanged{}, fmt.Errorf("reading upstream %q error: %w", d.cfg.Name, context.Cause(ctx))
	}
	out := provider.Classify(d.cfg.Protocol, resp.StatusCode, resp.Header, body, now)
	if out.Kind == llm.Rate && !out.HasRetryAfter {
		// The exhausted bucket's reset is the provider's hint too.
		if t, ok := rl.Exhausted(); ok {
			out.RetryAfter, out.HasRetryAfter = max(t.Sub(now), 0), true
		}
	}
	if out.Kind == llm.Rate {
		d.obs.RateLimited(overshoot(rl, known))
	}
	keyOut := d.noteAnswer(k, out, true, g.keyProbe, now)
	d.obs.Attempted(out.Kind, resp.StatusCode, since(start, now))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if keyOut {
		// Not the request's fault nor the upstream's health: it goes to
		// another key.
		d.release(w, g, flow.Neutral, tokensOnly(w.cost))
		return exchanged{out: out, errResp: resp, keyOut: true}, nil
	}
	d.settle(w, g, out)
	return exchanged{out: out, errResp: resp}, nil
}

// settle records what a failed call tells about the upstream and releases
// its slot: a rate limit pauses the whole upstream until its hint (and a
// "Slow Down" cuts its rate), an overload or timeout lowers the adaptive
// concurrency, and the breaker counts the result. The tokens are refunded
// but the request itself counts: it reached (or may have reached) the
// provider.
func (d *Dispatcher) settle(w *waiter, g admission, out llm.Outcome) {
	now := d.clk.Now()
	d.recordFailure(out, now)
	r := flow.Neutral
	switch out.Kind {
	case llm.ClientError:
		r = flow.Healthy // the upstream answered properly
	case llm.Rate:
		if out.SlowDown {
			// OpenAI's 503 "Slow Down": back to a lower rate, then ramp up.
			g.key.lim.SlowDown(SlowDownFactor, SlowDownRamp, now)
		}
		hint := out.RetryAfter
		if !out.HasRetryAfter {
			hint = d.backoff.Ceiling(w.burnt)
		}
		d.pauseKey(g.key, now.Add(hint), now, out.HasRetryAfter)
	case llm.Overload, llm.Transient, llm.StreamFail:
		if out.Kind == llm.Overload || out.ErrorType == "timeout" {
			d.aimd.OnOverload()
		}
		r = flow.Failed
	case llm.Success, llm.Quota:
		// Neutral: a quota error says nothing about the upstream's health.
	}
	d.release(w, g, r, tokensOnly(w.cost))
}

// retryOrFail acts on a failed call's fate (the slot is already released):
// the provider's answer passed through, a give-up, or a retry (w back in
// the queue). Every call that reached the provider burns an attempt, a rate
// limit included, except a failed half-open breaker probe: it tested the
// upstream, not the request, which goes back to its place in line for the
// next probe, bounded by its deadline (the breaker already allows only a
// few probes per open period). Without that, the head of the line is the
// probe again and again through a long outage and runs out of attempts
// although its deadline outlasts the outage (docs/engine.md, "Headroom for
// urgent classes"). A job's probe does burn: jobs wait in the store, not
// in line.
func (d *Dispatcher) retryOrFail(ctx context.Context, w *waiter, x exchanged, g admission) (*Response, bool, error) {
	now := d.clk.Now()
	out := x.out
	w.last = &out
	probe := g.probe
	if x.keyOut {
		// The key was taken out of the pool: the request goes back to its
		// place in line for another key, without burning an attempt.
		d.obs.Retried(out.Kind)
		if err := d.putBack(w); err != nil {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, true, nil
	}
	fate := DecideFate(FateParams{Sent: true, Outcome: out, Burnt: w.burnt, HintlessRates: w.hintlessRate,
		Backoff: d.backoff, Now: now, U: d.uniform()})
	if out.Kind == llm.Rate && !out.HasRetryAfter {
		w.hintlessRate++
	}
	if fate.Kind == Retry && outageKind(&out) && w.req.FailFast {
		// A caller with a fallback: the first failure of a new outage
		// sends it there at once, not after backoff on this upstream.
		w.burnt++
		return nil, false, d.giveUp(w, ErrUnavailable, "the upstream failed: "+describe(out))
	}
	if probe && fate.Kind == Retry && outageKind(&out) {
		d.obs.Retried(out.Kind)
		if err := d.putBack(w); err != nil {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, true, nil
	}
	w.burnt++
	if fate.Kind == Terminal {
		// The client sees the provider's own answer.
		if x.errResp == nil {
			return nil, false, d.giveUp(w, ErrRetriesExhausted, "upstream refused: "+cmp.Or(out.Message, out.Kind.String()))
		}
		return &Response{Response: x.errResp, QueueWait: w.queueWait, Attempts: w.attempts, Outcome: out, Protocol: d.cfg.Protocol,
			Upstream: d.cfg.Name, Key: g.key.cred.Load().fp}, false, nil
	}
	if w.burnt >= d.cfg.Retry.MaxAttempts {
		return nil, false, d.giveUp(w, ErrRetriesExhausted, fmt.Sprintf("%d attempts failed, last: %s", w.burnt, describe(out)))
	}
	wait := fate.At.Sub(now)
	if out.Kind == llm.Rate {
		if fate.At.After(w.deadline) && len(d.keys) == 1 {
			e := d.giveUp(w, ErrDeadline, fmt.Sprintf("upstream rate limited for %v, past the request's deadline", wait.Round(time.Millisecond)))
			e.RetryAfter = clientRetryAfter(wait)
			return nil, false, e
		}
		// The key is paused until the hint: wait in line (for another key
		// of the pool, or this one's hint).
		d.pauseKey(g.key, fate.At, now, out.HasRetryAfter)
		d.obs.Retried(out.Kind)
		if err := d.putBack(w); err != nil {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, true, nil
	}
	if !d.budget.TryRetry(now) {
		return nil, false, d.giveUp(w, ErrRetryBudget, "the upstream's retry budget is spent, last: "+describe(out))
	}
	if fate.At.After(w.deadline) {
		// An outage it cannot outlast: the deadline ends before the retry.
		return nil, false, d.giveUp(w, ErrUnavailable, "no time left before the deadline to retry after "+describe(out))
	}
	d.obs.Retried(out.Kind)
	if err := d.sleep(ctx, wait); err != nil {
		if errors.Is(err, ErrStopped) {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, false, fmt.Errorf("backing off before retrying upstream %q: %w", d.cfg.Name, err)
	}
	if err := d.putBack(w); err != nil {
		return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
	}
	return nil, true, nil
}

func describe(o llm.Outcome) string {
	s := o.Kind.String()
	if o.Status != 0 {
		s += fmt.Sprintf(" (status %d)", o.Status)
	}
	if o.Message != "" {
		s += ": " + o.Message
	}
	return s
}

// stream reads a 2xx event stream ahead until the first content (or its
// end, or an error event). An error before any content is retried
// invisibly; otherwise the bytes read ahead are replayed to the client
// ahead of the rest of the stream.
func (d *Dispatcher) stream(ctx context.Context, w *waiter, g admission, resp *http.Response, start time.Time, c *callLink) (exchanged, error) {
	so := provider.NewStreamObserverFor(d.cfg.Protocol, w.req.Endpoint)
	var ahead bytes.Buffer
	buf := make([]byte, 16<<10)
	var readErr error
	for !so.Content() && !so.Done() {
		if _, bad := so.StreamError(); bad {
			break
		}
		n, err := resp.Body.Read(buf)
		ahead.Write(buf[:n])
		_, _ = so.Write(buf[:n])
		if err != nil {
			readErr = err
			break
		}
	}
	now := d.clk.Now()
	se, bad := so.StreamError()
	// An error read in the same chunk as content came after it (an error
	// event ends a stream): content has started either way.
	if so.Content() || (so.Done() && !bad) {
		d.obs.Attempted(llm.Success, resp.StatusCode, since(start, now))
		c.detach() // the stream outlives its reader, if it leaves
		return exchanged{resp: d.success(w, g, resp, &ahead, so, c)}, nil
	}
	_ = resp.Body.Close()
	if ctx.Err() != nil {
		// The provider answered: the request counts, and so do the
		// tokens its stream already reported.
		refund := tokensOnly(w.cost)
		if u, ok := so.Usage(); ok {
			refund = tokensOnly(w.cost.Sub(actualAmount(d.cfg.Protocol, w.req.Cost.Model, u)))
		}
		d.release(w, g, flow.Neutral, refund)
		return exchanged{}, fmt.Errorf("reading upstream %q stream: %w", d.cfg.Name, context.Cause(ctx))
	}
	out := se
	if !bad {
		msg := "stream ended before any content"
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			msg = "stream broke before any content: " + readErr.Error()
		}
		out = llm.Outcome{Kind: llm.StreamFail, ErrorType: "stream_error", Message: msg}
	}
	d.obs.Attempted(llm.StreamFail, resp.StatusCode, since(start, now))
	d.settle(w, g, out)
	return exchanged{out: out}, nil
}

func (d *Dispatcher) newUpstreamRequest(ctx context.Context, r *Request, k *poolKey) (*http.Request, error) {
	path := r.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	req, err := http.NewRequestWithContext(ctx, cmp.Or(r.Method, http.MethodPost), d.base+path, bytes.NewReader(r.Body))
	if err != nil {
		return nil, err
	}
	// r.Header was cleaned by the front door (frontdoor.Build); only the
	// upstream's own key and the protocol's defaults are added here.
	req.Header = r.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	provider.SetUpstreamHeaders(req.Header, d.cfg.Protocol, k.cred.Load().secret, true)
	injectTrace(ctx, req.Header)
	return req, nil
}

// callLink is an upstream call's context: cancel ends it, unlink stops
// the caller's cancel from reaching it. release, deferred by the attempt,
// ends it unless a body took it over (handOver), which releases it when
// it ends.
type callLink struct {
	caller   context.Context // the caller's own context
	cancel   context.CancelFunc
	unlink   func() bool
	handed   bool
	detached atomic.Bool
}

// detach lets the call outlive its caller's context, unless the caller's
// context ends with ErrStopped as its cause (the gateway cutting it).
func (c *callLink) detach() { c.detached.Store(true) }

// handOver gives the call to a body: release leaves it be.
func (c *callLink) handOver() { c.handed = true }

// release ends the call unless a body took it over.
func (c *callLink) release() {
	if !c.handed {
		c.unlink()
		c.cancel()
	}
}

// end ends a call a body took over.
func (c *callLink) end() {
	c.unlink()
	c.cancel()
}

// overshoot tells whether a rate-limit answer is the engine's own
// overshoot: the limit of a dimension the provider reports exhausted was
// known to the engine (configured or learned) before the answer. Without
// headers naming the dimension, any known limit counts.
func overshoot(rl provider.RateLimits, known [flow.NumDims]flow.BucketState) bool {
	named := false
	for dim, b := range rl {
		d, ok := dimOf[dim]
		if !ok || b.Remaining != 0 {
			continue
		}
		named = true
		if known[d].Capacity > 0 {
			return true
		}
	}
	if named {
		return false
	}
	for _, b := range known {
		if b.Capacity > 0 {
			return true
		}
	}
	return false
}
