package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// Token counting (Anthropic POST /v1/messages/count_tokens) is free and
// limited by its own requests-per-minute bucket on each key, apart from
// the messages quota: the provider charges it nothing from RPM, ITPM or
// OTPM and a 429 on it says nothing of them. So a counting request never
// enters the scheduler, the messages buckets, the breaker, the adaptive
// concurrency or the retry budget: CountTokens takes one request from a
// key's counting bucket (limits.count_tokens_per_minute, else learned
// from the route's rate-limit headers), sends it, and passes the
// provider's answer through. A 429 pauses that key's counting bucket only
// (until its retry-after), and the request goes to another key, or waits,
// while its deadline allows; when no key's bucket can take it before its
// deadline the caller gets ErrShed (a 429 with retry-after).

// countTokensCost is one counting request: the dimension its bucket has.
var countTokensCost = flow.Amount{flow.Requests: 1}

// countTokensPool is the counting buckets of the pool's keys, in the
// pool's order.
type countTokensPool struct {
	mu   sync.Mutex // serializes picking a key and reserving on it
	lims []*flow.Limiter
}

// newCountTokensPool builds a counting bucket for each key of cfg.
func newCountTokensPool(cfg settings, now time.Time) (*countTokensPool, error) {
	p := &countTokensPool{}
	for i, k := range cfg.Keys() {
		lc := cfg.limiterConfig()
		lc.Limits = [flow.NumDims]float64{flow.Requests: float64(k.Limits.CountTokensPerMinute)}
		lim, err := flow.NewLimiter(lc, now)
		if err != nil {
			return nil, fmt.Errorf("api_keys[%d].limits.count_tokens_per_minute: %w", i, err)
		}
		p.lims = append(p.lims, lim)
	}
	return p, nil
}

// take reserves one counting request on the key (of those in the pool)
// whose bucket has room now, or returns how long until the earliest has.
// d.mu must not be held.
func (d *Dispatcher) countTokensTake(now time.Time) (int, time.Duration) {
	d.mu.Lock()
	in := make([]bool, len(d.keys))
	anyIn := false
	for i, k := range d.keys {
		in[i] = !k.out
		anyIn = anyIn || in[i]
	}
	d.mu.Unlock()
	p := d.counting
	p.mu.Lock()
	defer p.mu.Unlock()
	wait := time.Duration(-1)
	for i, lim := range p.lims {
		if anyIn && !in[i] {
			continue
		}
		w, err := lim.TimeUntil(countTokensCost, now)
		if err != nil {
			continue
		}
		if w == 0 {
			if rw, err := lim.Reserve(countTokensCost, now); err == nil && rw == 0 {
				return i, 0
			}
			w = time.Millisecond
		}
		if wait < 0 || w < wait {
			wait = w
		}
	}
	if wait < 0 {
		wait = time.Minute // nothing can say: try again in a minute
	}
	return -1, wait
}

// CountTokens sends a token-counting request on its own per-key bucket
// and returns the provider's answer (a 2xx or its error, passed through;
// the caller closes the Body). It fails with an *Error whose Reason is
// ErrShed (no key's counting bucket has room before the deadline: a 429
// with RetryAfter), ErrStopped, or ctx's cause.
func (d *Dispatcher) CountTokens(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, errors.New("counting tokens: nil request")
	}
	now := d.clk.Now()
	class := req.Priority
	if !class.Valid() {
		class = 0
	}
	deadline := req.Deadline
	if deadline.IsZero() {
		deadline = now.Add(d.cfg.MaxWait[class])
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	attempts := 0
	var queued time.Duration
	for {
		if err := d.countTokensRunning(); err != nil {
			return nil, err
		}
		now = d.clk.Now()
		i, wait := d.countTokensTake(now)
		if i < 0 {
			if now.Add(wait).After(deadline) {
				return nil, d.countTokensShed(attempts, queued, wait)
			}
			if err := d.sleep(ctx, wait); err != nil {
				if errors.Is(err, ErrStopped) {
					return nil, d.countTokensStopped(attempts, queued)
				}
				return nil, fmt.Errorf("waiting to count tokens on upstream %q: %w", d.cfg.Name, err)
			}
			queued += d.clk.Now().Sub(now)
			continue
		}
		attempts++
		resp, retryAt, err := d.countTokensCall(ctx, req, i)
		if err != nil || retryAt.IsZero() {
			if resp != nil {
				resp.Attempts, resp.QueueWait = attempts, queued
			}
			return resp, err
		}
		// A 429 on this key's counting bucket: another key, or this one
		// after its hint, while the deadline allows.
		if retryAt.After(deadline) && len(d.keys) == 1 {
			return nil, d.countTokensShed(attempts, queued, retryAt.Sub(d.clk.Now()))
		}
	}
}

// countTokensCall sends req on key i. A 429 pauses the key's counting
// bucket and returns the instant it may be tried again (non-zero), with
// no response; every other answer is returned as it is.
func (d *Dispatcher) countTokensCall(ctx context.Context, req *Request, i int) (*Response, time.Time, error) {
	k := d.keys[i]
	lim := d.counting.lims[i]
	hreq, err := d.newUpstreamRequest(ctx, req, k)
	if err != nil {
		lim.Unreserve(countTokensCost, d.clk.Now())
		return nil, time.Time{}, fmt.Errorf("building request for upstream %q: %w", d.cfg.Name, err)
	}
	mark := lim.Mark(d.clk.Now())
	resp, err := d.cfg.HTTPClient.Do(hreq)
	now := d.clk.Now()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("counting tokens on upstream %q: %w", d.cfg.Name, err)
	}
	rl := provider.ParseRateLimits(d.cfg.Protocol, resp.Header, now)
	if obs := observations(d.cfg.Protocol, rl); obs[flow.Requests].Limit > 0 {
		lim.Observe(map[flow.Dim]flow.Observation{flow.Requests: obs[flow.Requests]}, mark, now)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		hint, ok := provider.ParseRetryAfter(resp.Header, now)
		if !ok {
			if t, ok := rl.Exhausted(); ok {
				hint = max(t.Sub(now), 0)
			} else {
				hint = time.Second
			}
		}
		_ = resp.Body.Close()
		until := now.Add(max(hint, time.Millisecond))
		lim.Pause(until, now)
		return nil, until, nil
	}
	return &Response{Response: resp, Outcome: provider.Classify(d.cfg.Protocol, resp.StatusCode, resp.Header, nil, now),
		Protocol: d.cfg.Protocol, Upstream: d.cfg.Name, Key: k.cred.Load().fp}, time.Time{}, nil
}

// countTokensRunning fails once the dispatcher stops or drains.
func (d *Dispatcher) countTokensRunning() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != running || d.draining {
		return &Error{Reason: ErrStopped, Status: http.StatusServiceUnavailable, Type: errorTypeFor(d.cfg.Protocol, http.StatusServiceUnavailable),
			Message: "the gateway is shutting down"}
	}
	return nil
}

func (d *Dispatcher) countTokensStopped(attempts int, queued time.Duration) *Error {
	return &Error{Reason: ErrStopped, Status: http.StatusServiceUnavailable, Type: errorTypeFor(d.cfg.Protocol, http.StatusServiceUnavailable),
		Message: "the upstream's dispatcher stopped", Attempts: attempts, QueueWait: queued}
}

// countTokensShed is the 429 of a counting request no key can take
// before its deadline: wait is how long until one could.
func (d *Dispatcher) countTokensShed(attempts int, queued, wait time.Duration) *Error {
	return &Error{Reason: ErrShed, Status: http.StatusTooManyRequests, Type: errorTypeFor(d.cfg.Protocol, http.StatusTooManyRequests),
		Message:    fmt.Sprintf("token counting is rate limited on every key for %v, past the request's deadline", wait.Round(time.Millisecond)),
		RetryAfter: clientRetryAfter(wait), Attempts: attempts, QueueWait: queued}
}
