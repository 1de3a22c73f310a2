package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// A request's journey through the dispatcher (a waiter): queued, admitted
// (await), sent, then released (its reservation reconciled or refunded,
// its slot freed), put back in line for a retry, or given up on with an
// *Error.

// waiter is one request's journey through the dispatcher.
type waiter struct {
	req  *Request
	item flow.Item
	// cost is what the current (or next) attempt reserves: full, less
	// the prefix its key holds in its cache (costOn, set by pick).
	cost flow.Amount
	// full is the request's whole estimate; cache what its body says
	// about the provider's prompt cache; sentAt when its latest attempt
	// was sent (the cache's TTL runs from there).
	full      flow.Amount
	cache     promptCache
	sentAt    time.Time
	deadline  time.Time
	admission chan admission // buffered(1); sent under d.mu

	admittedOnce bool
	queueWait    time.Duration // waited before the latest attempt, in all
	// waitFrom is when the request last started waiting (arrival, the end
	// of an attempt); zero while an attempt is in flight.
	waitFrom     time.Time
	attempts     int // upstream attempts made
	burnt        int // attempts that count against MaxAttempts
	hintlessRate int // RATE answers without a retry hint
	last         *llm.Outcome
	ticket       bool // a durable caller's ticket (Acquire), not a Do
	// pin, when not nil, is the only key the request may be sent with:
	// the key that created the response it continues
	// (previous_response_id).
	pin *poolKey
	// ctx is Do's context, the parent of the request's spans (nil for a
	// ticket: its attempt's context is).
	ctx context.Context
	// gated is set once the request's Gate admitted it (d.mu held), held
	// is what the Gate last held it back with; gateOnce ends the Gate's
	// charge once (gateDone).
	gated    bool
	held     GateWait
	gateOnce sync.Once
}

// newWaiter is req's journey through the dispatcher, starting now.
func (d *Dispatcher) newWaiter(ctx context.Context, req *Request) *waiter {
	now := d.clk.Now()
	est := d.cal.adjust(req.Cost)
	w := &waiter{
		req:       req,
		cost:      flow.NewAmount(est.InputTokens, est.OutputTokens),
		admission: make(chan admission, 1),
		ctx:       ctx,
		pin:       d.responseKey(ctx, req.Cost.PreviousResponseID, now),
	}
	w.full = w.cost
	w.cache = d.cacheOf(req)
	class := req.Priority
	if !class.Valid() {
		class = llm.Normal
	}
	w.deadline = req.Deadline
	if w.deadline.IsZero() {
		w.deadline = now.Add(d.cfg.MaxWait[class])
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(w.deadline) {
		w.deadline = dl
	}
	w.waitFrom = now
	w.item = flow.Item{
		Class:   class,
		Client:  req.Client,
		Size:    float64(est.InputTokens + est.OutputTokens),
		Cost:    w.cost,
		Arrival: now,
		Value:   w,
	}
	return w
}

// do is Do for w: queue, admission, attempts and retries.
func (d *Dispatcher) do(ctx context.Context, w *waiter) (*Response, error) {
	req, class, now := w.req, w.item.Class, w.waitFrom
	if err := d.tooLarge(w.cost, now); err != nil {
		return nil, d.giveUp(w, ErrTooLarge, err.Error())
	}

	d.mu.Lock()
	if d.state != running || d.draining {
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrStopped, "the gateway is shutting down")
	}
	if ok, readyAt := d.brk.Ready(now); !ok && (readyAt.After(w.deadline) || req.FailFast || d.brk.Held()) {
		// An outage it cannot outlast (or one an operator holds open): say
		// so now, not at its deadline.
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrUnavailable, "")
	}
	if out, probeAt := d.keysOut(); out && (probeAt.IsZero() || probeAt.After(now)) {
		// Every key rejected and no probe due: the same (failKeysOut).
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrUnavailable, "")
	}
	predicted := d.predictWait(d.sched.DemandAhead(class, req.Client).Add(w.cost), now)
	if now.Add(predicted).After(w.deadline) {
		d.mu.Unlock()
		e := d.giveUp(w, ErrShed, fmt.Sprintf("predicted queue wait %v exceeds the deadline", predicted.Round(time.Millisecond)))
		e.RetryAfter = clientRetryAfter(predicted)
		return nil, e
	}
	if g := req.Gate; g != nil {
		// The client's own limit, with its requests already queued here.
		queued := d.sched.ClientDemand(req.Client).Add(w.cost)
		if wait, limit := g.Predict(queued[flow.Requests], queued[flow.Tokens], now); now.Add(wait).After(w.deadline) {
			d.mu.Unlock()
			e := d.giveUp(w, ErrClientLimit, fmt.Sprintf("%s leaves room for this request in %v, after its deadline", limit, wait.Round(time.Millisecond)))
			e.RetryAfter = clientRetryAfter(wait)
			return nil, e
		}
	}
	d.sched.Push(&w.item)
	d.arrived(class, w.cost, now)
	d.mu.Unlock()
	d.obs.Enqueued(class)
	// The fast path: run the admission step in the caller's goroutine
	// instead of waiting for the admission goroutine's turn. admit admits
	// in the scheduler's order under d.mu, as the loop does, so priority,
	// fairness and the quota hold whoever runs it; the loop is woken only
	// when a timed retry is due (a refill, a breaker), which only it keeps.
	if d.admit() > 0 {
		d.kick()
	}

	for {
		g, err := d.await(ctx, w)
		if err != nil {
			return nil, err
		}
		resp, retry, err := d.attempt(ctx, w, g)
		if !retry {
			return resp, err
		}
	}
}

// await waits in the queue for w's admission, its deadline, ctx or Stop.
func (d *Dispatcher) await(ctx context.Context, w *waiter) (admission, error) {
	select {
	case g := <-w.admission: // admitted at once: no timer
		if g.err != nil {
			return g, d.grantError(w, g.err)
		}
		return g, nil
	default:
	}
	t := d.clk.NewTimer(w.deadline.Sub(d.clk.Now()))
	defer t.Stop()
	var reason error
	select {
	case g := <-w.admission:
		if g.err != nil {
			return g, d.grantError(w, g.err)
		}
		return g, nil
	case <-ctx.Done():
		reason = context.Cause(ctx)
	case <-t.C():
		reason = ErrDeadline
		d.mu.Lock()
		out, _ := d.keysOut()
		d.mu.Unlock()
		if st, _ := d.brk.State(d.clk.Now()); st != flow.Closed || out {
			reason = ErrUnavailable // it was the outage that held it
		}
	}
	d.mu.Lock()
	var held GateWait
	if d.sched.Held(&w.item, d.clk.Now()) {
		held = w.held // its client's own limit is what holds it
	}
	d.mu.Unlock()
	d.mu.Lock()
	removed := d.sched.Remove(&w.item)
	d.mu.Unlock()
	if !removed {
		// Admitted (or stopped) in the meantime: the admission is in the channel.
		g := <-w.admission
		if g.err == nil {
			d.release(w, g, flow.Neutral, w.cost)
		}
	}
	d.kick()
	switch {
	case errors.Is(reason, ErrUnavailable):
		return admission{}, d.giveUp(w, ErrUnavailable, "")
	case errors.Is(reason, ErrDeadline) && held.Waits():
		e := d.giveUp(w, ErrClientLimit, held.Limit+" held the request until its deadline")
		e.RetryAfter = clientRetryAfter(held.For)
		return admission{}, e
	case errors.Is(reason, ErrDeadline):
		return admission{}, d.giveUp(w, ErrDeadline, "the request waited in the queue until its deadline")
	}
	return admission{}, fmt.Errorf("waiting for upstream %q: %w", d.cfg.Name, reason)
}

func (d *Dispatcher) grantError(w *waiter, err error) error {
	switch {
	case errors.Is(err, ErrStopped):
		d.mu.Lock()
		draining := d.draining
		d.mu.Unlock()
		if draining {
			return d.giveUp(w, ErrStopped, "the gateway is shutting down")
		}
		return d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
	case errors.Is(err, flow.ErrTooLarge):
		return d.giveUp(w, ErrTooLarge, err.Error())
	case errors.Is(err, ErrUnavailable):
		return d.giveUp(w, ErrUnavailable, "")
	}
	return err
}

// release frees an admitted request's slot and refunds what it did not
// use.
func (d *Dispatcher) release(w *waiter, g admission, r flow.Result, refund flow.Amount) {
	if g.key != nil {
		g.key.answered(w)
	}
	now := d.clk.Now()
	if g.key != nil {
		g.key.refund(refund, now)
	}
	d.freeSlot(w, g, r, now, nil)
}

// releaseAnswered is release for a request the provider answered with its
// usage: the reservation is reconciled with actual, so that Observe can
// credit the output the provider gave back.
func (d *Dispatcher) releaseAnswered(w *waiter, g admission, r flow.Result, actual flow.Amount) {
	if g.key != nil {
		g.key.answered(w)
	}
	now := d.clk.Now()
	if g.key != nil {
		g.key.reconcile(w.cost, actual, now)
	}
	d.freeSlot(w, g, r, now, &actual)
}

// freeSlot is the end of release: the breaker's verdict, the slot, and
// for an answered request (used: its usage) the room's backlog corrected
// from its arrival's estimate (flow.BurstRoom.Settle).
func (d *Dispatcher) freeSlot(w *waiter, g admission, r flow.Result, now time.Time, used *flow.Amount) {
	w.waitFrom = now // whatever follows (backoff, the queue) is waiting
	d.brk.Done(g.gen, r, now)
	d.mu.Lock()
	if c := w.item.Class; used != nil && c < llm.NumPriorities-1 && d.cfg.RoomCap > 0 {
		d.room.Settle(c, w.full.Sub(*used), d.poolRate(now), now)
	}
	d.inflight--
	d.reserved = d.reserved.Sub(g.reserved)
	if g.key != nil {
		g.key.inflight--
		g.key.probing = false
	}
	d.mu.Unlock()
	d.kick()
}

// giveUp builds the *Error for reason and tells the observer. An outage
// (ErrUnavailable, or attempts that ended in overload, server errors or
// timeouts) is answered in the provider's overloaded shape with a message
// naming its cause; msg "" lets the outage describe itself.
func (d *Dispatcher) giveUp(w *waiter, reason error, msg string) *Error {
	now := d.clk.Now()
	e := &Error{
		Reason:    reason,
		Message:   msg,
		Attempts:  w.attempts,
		QueueWait: w.queueWait,
		Last:      w.last,
	}
	if !w.waitFrom.IsZero() {
		e.QueueWait += since(w.waitFrom, now)
		d.traceQueueWait(w, now, reason)
	}
	exhausted := errors.Is(reason, ErrRetriesExhausted) || errors.Is(reason, ErrRetryBudget)
	switch {
	case errors.Is(reason, ErrTooLarge):
		e.Status = http.StatusRequestEntityTooLarge
	case errors.Is(reason, ErrStopped):
		e.Status = http.StatusServiceUnavailable
	case errors.Is(reason, ErrUnavailable), exhausted && outageKind(w.last):
		d.describeOutage(e, now, w.burnt)
	case exhausted:
		e.Status = statusForGiveUp(w.last)
		e.RetryAfter = clientRetryAfter(d.backoff.Ceiling(w.burnt))
	case errors.Is(reason, ErrClientLimit):
		e.Status = http.StatusTooManyRequests // the caller sets RetryAfter from its gate
	default: // shed, deadline: a quota wait
		e.Status = http.StatusTooManyRequests
		e.RetryAfter = clientRetryAfter(time.Second)
	}
	e.Type = errorTypeFor(d.cfg.Protocol, e.Status)
	d.obs.Shed(w.item.Class, reason)
	return e
}

// clientRetryAfter is the retry-after suggested to a client: at least 1s,
// at most MaxClientRetryAfter.
func clientRetryAfter(d time.Duration) time.Duration {
	return min(max(d, time.Second), MaxClientRetryAfter).Round(time.Second)
}

// sleep waits d on the clock, or until ctx ends or the dispatcher stops.
func (d *Dispatcher) sleep(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		return nil
	}
	t := d.clk.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-d.stopping:
		return ErrStopped
	case <-d.drained:
		return ErrStopped
	}
}

// putBack puts w back in its original place in line (a retry; a job is
// requeued in the store instead).
func (d *Dispatcher) putBack(w *waiter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != running || (d.draining && !w.ticket) {
		return ErrStopped
	}
	d.sched.PutBack(&w.item)
	d.queued(w.item.Class, d.clk.Now())
	d.kick()
	return nil
}

func (d *Dispatcher) uniform() float64 {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	return d.cfg.Rand.Float64()
}
