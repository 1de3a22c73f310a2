package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// Token counting (Anthropic POST /v1/messages/count_tokens, OpenAI POST
// /v1/responses/input_tokens) is free and limited by its own
// requests-per-minute bucket on each key, apart from the model endpoints'
// quota: the provider charges it nothing from RPM, ITPM, OTPM or TPM and a
// 429 on it says nothing of them. So a counting request never
// enters the scheduler, the messages buckets, the breaker, the adaptive
// concurrency or the retry budget: CountTokens takes one request from a
// key's counting bucket (limits.count_tokens_per_minute, else learned
// from the route's rate-limit headers), sends it, and passes the
// provider's answer through. A 429 pauses that key's counting bucket only
// (until its retry-after), and the request goes to another key, or waits,
// while its deadline allows; when no key's bucket can take it before its
// deadline the caller gets ErrShed (a 429 with retry-after). A count that
// names a previous_response_id goes to the key that created that
// response, as the create would: no other key can read it.

// countTokensCost is one counting request: the dimension its bucket has.
var countTokensCost = flow.Amount{flow.Requests: 1}

// countTokensPool is the counting buckets of the pool's keys, in the
// pool's order.
//
// A bucket whose limit is neither configured nor yet reported is learned
// from one probe: while its first request is on its way no other request
// goes to that key, so a flood that arrives before any answer sends one
// request per key, not the whole flood, and the probe's rate-limit
// headers size the bucket for the rest. A key whose probe came back with
// no report stays unlimited.
type countTokensPool struct {
	mu     sync.Mutex // serializes picking a key and reserving on it
	lims   []*flow.Limiter
	probed []probeState
	// unanswered is, per key, when each request on its way was
	// reserved: a report may not count those reserved before the one it
	// answers (they may reach the provider after it), so its Mark looks
	// back to the oldest of them.
	unanswered [][]time.Time
	// answered is closed (and replaced) whenever a probe completes, to
	// wake the requests waiting on it.
	answered chan struct{}
}

// probeState is where a key's counting bucket is in being learned.
type probeState uint8

const (
	probeNone    probeState = iota // no request sent yet
	probeSending                   // its first request is on its way
	probeDone                      // answered (a limit is known, or none was reported)
)

// newCountTokensPool builds a counting bucket for each key of cfg.
func newCountTokensPool(cfg settings, now time.Time) (*countTokensPool, error) {
	p := &countTokensPool{answered: make(chan struct{})}
	for i, k := range cfg.Keys() {
		lc := cfg.limiterConfig()
		lc.Limits = [flow.NumDims]float64{flow.Requests: float64(k.Limits.CountTokensPerMinute)}
		lim, err := flow.NewLimiter(lc, now)
		if err != nil {
			return nil, fmt.Errorf("api_keys[%d].limits.count_tokens_per_minute: %w", i, err)
		}
		p.lims = append(p.lims, lim)
		st := probeNone
		if k.Limits.CountTokensPerMinute > 0 {
			st = probeDone
		}
		p.probed = append(p.probed, st)
	}
	p.unanswered = make([][]time.Time, len(p.lims))
	return p, nil
}

// reserved records a request reserved on key i at now and returns the
// Mark its report is compared with. p.mu must be held, and the Mark is
// taken under it with the reservation, so it counts exactly the debits
// before this one.
func (p *countTokensPool) reserved(i int, now time.Time) flow.Mark {
	var oldest time.Time
	for _, t := range p.unanswered[i] {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	p.unanswered[i] = append(p.unanswered[i], now)
	return p.lims[i].Mark(now).From(oldest)
}

// forget forgets one request reserved on key i at at.
func (p *countTokensPool) forget(i int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.unanswered[i]
	for j, t := range u {
		if t.Equal(at) {
			p.unanswered[i] = append(u[:j], u[j+1:]...)
			return
		}
	}
}

// probeAnswered records that key i's probe came back (answered) or
// failed on its way (the next request probes again), and wakes the
// requests waiting on it.
func (p *countTokensPool) probeAnswered(i int, answered bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probed[i] != probeSending {
		return
	}
	p.probed[i] = probeNone
	if answered {
		p.probed[i] = probeDone
	}
	close(p.answered)
	p.answered = make(chan struct{})
}

// countTokensTake reserves one counting request on the key (of those in
// the pool, or key only when it is not negative) whose bucket has room
// now and says whether it is that key's probe; or it returns how long
// until the earliest has room, and, when only probes on their way stand
// in the way, a channel closed when one comes back. d.mu must not be held.
func (d *Dispatcher) countTokensTake(now time.Time, only int) (key int, mark flow.Mark, probe bool, wait time.Duration, answered <-chan struct{}) {
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
	wait = -1
	for i, lim := range p.lims {
		if (anyIn && !in[i] && only < 0) || (only >= 0 && i != only) {
			continue
		}
		if p.probed[i] == probeSending {
			answered = p.answered
			continue
		}
		if p.probed[i] == probeNone && lim.State(now)[flow.Requests].Capacity == 0 {
			if _, err := lim.Reserve(countTokensCost, now); err == nil {
				p.probed[i] = probeSending
				return i, p.reserved(i, now), true, 0, nil
			}
			continue
		}
		w, err := lim.TimeUntil(countTokensCost, now)
		if err != nil {
			continue
		}
		if w == 0 {
			if rw, err := lim.Reserve(countTokensCost, now); err == nil && rw == 0 {
				return i, p.reserved(i, now), false, 0, nil
			}
			w = time.Millisecond
		}
		if wait < 0 || w < wait {
			wait = w
		}
	}
	if wait < 0 {
		if answered != nil {
			return -1, flow.Mark{}, false, 0, answered
		}
		wait = time.Minute // nothing can say: try again in a minute
	}
	return -1, flow.Mark{}, false, wait, answered
}

// countTokensAwait waits until a probe comes back, ctx ends or the
// dispatcher stops.
func (d *Dispatcher) countTokensAwait(ctx context.Context, answered <-chan struct{}) error {
	select {
	case <-answered:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-d.stopping:
		return ErrStopped
	case <-d.drained:
		return ErrStopped
	}
}

// CountTokens sends a token-counting request on its own per-key bucket
// and returns the provider's answer (a 2xx or its error, passed through;
// the caller closes the Body). It fails with an *Error whose Reason is
// ErrShed (no key's counting bucket has room before the deadline: a 429
// with RetryAfter), ErrUnavailable (the provider rejected every key of the
// pool: PassOutage), ErrStopped, or ctx's cause.
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
	only := -1
	if k := d.responseKey(ctx, req.Cost.PreviousResponseID, now); k != nil {
		only = slices.Index(d.keys, k)
	}
	attempts := 0
	var queued time.Duration
	for {
		if err := d.countTokensRunning(); err != nil {
			return nil, err
		}
		if e := d.PassOutage(); e != nil {
			// Every key rejected: the outage, not the provider's 401.
			e.Attempts, e.QueueWait = attempts, queued
			return nil, e
		}
		now = d.clk.Now()
		i, mark, probe, wait, answered := d.countTokensTake(now, only)
		if i < 0 {
			if wait == 0 {
				// Only probes on their way stand in the way: their answers
				// size the buckets.
				if err := d.countTokensAwait(ctx, answered); err != nil {
					if errors.Is(err, ErrStopped) {
						return nil, d.countTokensStopped(attempts, queued)
					}
					return nil, fmt.Errorf("waiting to count tokens on upstream %q: %w", d.cfg.Name, err)
				}
				queued += d.clk.Now().Sub(now)
				continue
			}
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
		resp, retryAt, err := d.countTokensCall(ctx, req, i, mark)
		d.counting.forget(i, now)
		if probe {
			d.counting.probeAnswered(i, err == nil)
		}
		if err != nil || retryAt.IsZero() {
			if resp != nil {
				resp.Attempts, resp.QueueWait = attempts, queued
			}
			return resp, err
		}
		// A 429 on this key's counting bucket: another key, or this one
		// after its hint, while the deadline allows.
		if retryAt.After(deadline) && (len(d.keys) == 1 || only >= 0) {
			return nil, d.countTokensShed(attempts, queued, retryAt.Sub(d.clk.Now()))
		}
	}
}

// countTokensCall sends req on key i, reserved at mark. A 429 pauses the key's counting
// bucket and returns the instant it may be tried again (non-zero), with
// no response; every other answer is returned as it is.
func (d *Dispatcher) countTokensCall(ctx context.Context, req *Request, i int, mark flow.Mark) (*Response, time.Time, error) {
	k := d.keys[i]
	lim := d.counting.lims[i]
	hreq, err := d.newUpstreamRequest(ctx, req, k)
	if err != nil {
		lim.Unreserve(countTokensCost, d.clk.Now())
		return nil, time.Time{}, fmt.Errorf("building request for upstream %q: %w", d.cfg.Name, err)
	}
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
