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
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// attempt sends one admitted attempt and decides what follows: a response
// to return (retry false), an error to return, or a retry (w is back in
// the queue).
func (d *Dispatcher) attempt(ctx context.Context, w *waiter, g grant) (*Response, bool, error) {
	start := d.clk.Now()
	if !w.admittedOnce {
		w.admittedOnce = true
		w.queueWait = since(w.item.Arrival, start)
		d.obs.Admitted(w.item.Class, w.queueWait)
		d.budget.RecordRequest(start)
	}
	w.attempts++
	hreq, err := d.newUpstreamRequest(ctx, w.req)
	if err != nil {
		d.release(w, g, flow.Neutral, w.cost)
		return nil, false, fmt.Errorf("building request for upstream %q: %w", d.cfg.Name, err)
	}
	resp, err := d.cfg.HTTPClient.Do(hreq)
	now := d.clk.Now()
	if err != nil {
		if ctx.Err() != nil {
			d.release(w, g, flow.Neutral, w.cost)
			return nil, false, fmt.Errorf("calling upstream %q: %w", d.cfg.Name, context.Cause(ctx))
		}
		out := provider.ClassifyTransportError(err)
		d.obs.Attempted(out.Kind, 0, since(start, now))
		return d.retryOrFail(ctx, w, g, out, nil, nil)
	}
	rl := provider.ParseRateLimits(d.cfg.Protocol, resp.Header, now)
	d.lim.Observe(observations(rl), now)

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if isEventStream(resp.Header) {
			return d.stream(ctx, w, g, resp, start)
		}
		d.obs.Attempted(llm.Success, resp.StatusCode, since(start, now))
		return d.success(w, g, resp, nil, nil), false, nil
	}

	body, readErr := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	_ = resp.Body.Close()
	if readErr != nil && ctx.Err() != nil {
		d.release(w, g, flow.Neutral, w.cost)
		return nil, false, fmt.Errorf("reading upstream %q error: %w", d.cfg.Name, context.Cause(ctx))
	}
	out := provider.Classify(d.cfg.Protocol, resp.StatusCode, resp.Header, body, now)
	d.obs.Attempted(out.Kind, resp.StatusCode, since(start, now))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return d.retryOrFail(ctx, w, g, out, resp, rl)
}

// retryOrFail acts on a failed attempt's outcome. resp, when not nil, is
// the upstream's error response (its body already buffered), passed
// through to the client when the outcome is terminal.
func (d *Dispatcher) retryOrFail(ctx context.Context, w *waiter, g grant, out llm.Outcome, resp *http.Response, rl provider.RateLimits) (*Response, bool, error) {
	now := d.clk.Now()
	w.last = &out
	refund := tokensOnly(w.cost) // it reached (or may have reached) the provider: the request counts
	noRetry := out.ShouldRetry != nil && !*out.ShouldRetry

	switch {
	case out.Kind == llm.ClientError, out.Kind == llm.Quota,
		resp != nil && noRetry,
		out.Kind == llm.Rate && !out.HasRetryAfter && w.hintlessRate > 0:
		// Terminal: the client sees the provider's own answer.
		r := flow.Neutral
		if out.Kind == llm.ClientError {
			r = flow.Healthy // the upstream answered properly
		}
		d.release(w, g, r, refund)
		if resp == nil {
			return nil, false, d.giveUp(w, ErrRetriesExhausted, "upstream refused: "+cmp.Or(out.Message, out.Kind.String()))
		}
		return &Response{Response: resp, QueueWait: w.queueWait, Attempts: w.attempts}, false, nil

	case out.Kind == llm.Rate:
		if out.SlowDown {
			// OpenAI's 503 "Slow Down": back to a lower rate, then ramp up.
			d.lim.Throttle(SlowDownFactor, SlowDownRamp, now)
		}
		hint := out.RetryAfter
		if !out.HasRetryAfter {
			w.hintlessRate++
			if t, ok := rl.Exhausted(); ok {
				hint = t.Sub(now)
			} else {
				hint = d.backoff.Ceiling(w.burnt)
			}
		}
		wait := d.backoff.RateDelay(hint, d.uniform())
		d.lim.Pause(now.Add(wait), now)
		d.release(w, g, flow.Neutral, refund)
		if now.Add(wait).After(w.deadline) {
			e := d.giveUp(w, ErrDeadline, fmt.Sprintf("upstream rate limited for %v, past the request's deadline", wait.Round(time.Millisecond)))
			e.RetryAfter = clientRetryAfter(wait)
			return nil, false, e
		}
		d.obs.Retried(out.Kind)
		if err := d.requeue(w); err != nil {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, true, nil
	}

	// Overload, Transient, StreamFail before any content: burn an attempt.
	if out.Kind == llm.Overload || out.ErrorType == "timeout" {
		d.aimd.OnOverload()
	}
	d.release(w, g, flow.Failed, refund)
	if g.probe {
		// A failed half-open probe tested the upstream, not the request:
		// the breaker opens again and the request waits in its place in
		// line for the next probe, bounded by its deadline, without
		// burning an attempt or retry budget. The breaker already limits
		// probes to a few per open period, so this cannot amplify load.
		d.obs.Retried(out.Kind)
		if err := d.requeue(w); err != nil {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, true, nil
	}
	w.burnt++
	if w.burnt >= d.cfg.Retry.MaxAttempts {
		return nil, false, d.giveUp(w, ErrRetriesExhausted, fmt.Sprintf("%d attempts failed, last: %s", w.burnt, describe(out)))
	}
	if !d.budget.TryRetry(now) {
		return nil, false, d.giveUp(w, ErrRetryBudget, "the upstream's retry budget is spent, last: "+describe(out))
	}
	delay := d.backoff.Delay(w.burnt-1, d.uniform())
	if out.HasRetryAfter {
		delay = max(delay, d.backoff.RateDelay(out.RetryAfter, d.uniform()))
	}
	if now.Add(delay).After(w.deadline) {
		return nil, false, d.giveUp(w, ErrDeadline, "no time left before the deadline to retry after "+describe(out))
	}
	d.obs.Retried(out.Kind)
	if err := d.sleep(ctx, delay); err != nil {
		if errors.Is(err, ErrStopped) {
			return nil, false, d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
		}
		return nil, false, fmt.Errorf("backing off before retrying upstream %q: %w", d.cfg.Name, err)
	}
	if err := d.requeue(w); err != nil {
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
func (d *Dispatcher) stream(ctx context.Context, w *waiter, g grant, resp *http.Response, start time.Time) (*Response, bool, error) {
	so := provider.NewStreamObserver(d.cfg.Protocol)
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
		return d.success(w, g, resp, &ahead, so), false, nil
	}
	_ = resp.Body.Close()
	if ctx.Err() != nil {
		d.release(w, g, flow.Neutral, w.cost)
		return nil, false, fmt.Errorf("reading upstream %q stream: %w", d.cfg.Name, context.Cause(ctx))
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
	return d.retryOrFail(ctx, w, g, out, nil, nil)
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}

func (d *Dispatcher) newUpstreamRequest(ctx context.Context, r *Request) (*http.Request, error) {
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
	provider.SetUpstreamHeaders(req.Header, d.cfg.Protocol, d.cfg.APIKey, true)
	return req, nil
}
