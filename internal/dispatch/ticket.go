package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Reasons a Ticket's call ends without a usable answer.
var (
	// ErrNotAdmitted means the ticket was given back before anything was
	// sent: the request's real cost did not fit its reservation and the
	// extra does not fit now. The Error's RetryAfter says when it would.
	ErrNotAdmitted = errors.New("not admitted: the request's cost does not fit now")
	// ErrCallFailed means the one upstream call failed; the Error's
	// Outcome says how.
	ErrCallFailed = errors.New("upstream call failed")
	// errTicketUsed is returned by a second Call, or a Call after Release.
	errTicketUsed = errors.New("ticket already used or released")
)

// AcquireParams asks for admission without a request yet.
type AcquireParams struct {
	// Priority is the scheduling class the ticket waits in.
	Priority llm.Priority
	// Client identifies the caller for fairness inside the class.
	Client string
	// Cost is the estimate reserved against the quota on admission; the
	// call adjusts it to the real request's cost.
	Cost provider.Cost
	// Deadline bounds the wait; zero waits until ctx ends or Stop.
	Deadline time.Time
}

// Ticket is an admission given to a durable caller (a job worker): a
// concurrency slot, the estimated cost reserved in the quota buckets and
// the breaker's permission (a half-open probe when Probe says so). Use it
// for exactly one Call, or give it back with Release. A Ticket is safe for
// use by one goroutine at a time.
type Ticket struct {
	d    *Dispatcher
	w    *waiter
	g    admission
	call func(context.Context, *Request) (*Response, error) // NewTicketFunc

	mu    sync.Mutex
	spent bool
}

// Acquire waits in the same scheduler as live requests (so weighted fair
// queueing between classes, and between durable and live traffic, holds)
// and returns once admitted: nothing is sent yet. It fails with an *Error
// (ErrTooLarge, ErrDeadline, ErrStopped) or ctx's cause.
func (d *Dispatcher) Acquire(ctx context.Context, p AcquireParams) (*Ticket, error) {
	now := d.clk.Now()
	w := d.ticketWaiter(ctx, p, now)
	if err := d.tooLarge(w.cost, now); err != nil {
		return nil, d.giveUp(w, ErrTooLarge, err.Error())
	}
	d.mu.Lock()
	if d.state != running {
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrStopped, "the upstream's dispatcher is not running")
	}
	d.sched.Push(&w.item)
	d.arrived(w.item.Class, w.cost, now)
	d.mu.Unlock()
	d.obs.Enqueued(w.item.Class)
	d.kick()
	g, err := d.await(ctx, w)
	if err != nil {
		return nil, err
	}
	return &Ticket{d: d, w: w, g: g}, nil
}

// TryAcquire grants a ticket only if admission is immediate: nothing is
// waiting in the scheduler (so it never jumps the line), the breaker
// allows a call, a slot is free and the cost fits now. It never waits.
func (d *Dispatcher) TryAcquire(p AcquireParams) (*Ticket, bool) {
	now := d.clk.Now()
	w := d.ticketWaiter(context.Background(), p, now)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != running || d.sched.Len() > 0 || d.inflight >= d.aimd.Limit() {
		return nil, false
	}
	if ok, _ := d.brk.Ready(now); !ok {
		return nil, false
	}
	key, _, err := d.pick(w, d.admitKeep(&w.item, now), now)
	if err != nil || key == nil {
		return nil, false
	}
	state, _ := d.brk.State(now)
	gen, err := d.brk.Allow(now)
	if err != nil {
		d.unpick(key, w.cost, now)
		return nil, false
	}
	d.arrived(w.item.Class, w.cost, now)
	d.inflight++
	key.inflight++
	key.noteReserved(w, now)
	d.noteAdmitted(w)
	return &Ticket{d: d, w: w, g: admission{gen: gen, at: now, probe: state == flow.HalfOpen, key: key, keyProbe: key.out, reserved: w.cost}}, true
}

// ticketWaiter is the waiter of a ticket: a placeholder request of the
// ticket's class until Call brings the real one.
func (d *Dispatcher) ticketWaiter(ctx context.Context, p AcquireParams, now time.Time) *waiter {
	class := p.Priority
	if !class.Valid() {
		class = llm.Normal
	}
	est := d.cal.adjust(p.Cost)
	w := &waiter{
		req:       &Request{Priority: class, Client: p.Client, Cost: p.Cost},
		cost:      flow.NewAmount(est.InputTokens, est.OutputTokens),
		admission: make(chan admission, 1),
		deadline:  p.Deadline,
		waitFrom:  now,
		ticket:    true,
		pin:       d.responseKey(ctx, p.Cost.PreviousResponseID, now),
	}
	w.full = w.cost
	if w.deadline.IsZero() {
		w.deadline = now.Add(100 * 365 * 24 * time.Hour) // no deadline: until ctx or Stop
	}
	w.item = flow.Item{
		Class:   class,
		Client:  p.Client,
		Size:    float64(est.InputTokens + est.OutputTokens),
		Cost:    w.cost,
		Arrival: now,
		Value:   w,
	}
	return w
}

// NewTicketFunc returns a ticket whose Call runs call once and whose
// Release does nothing: for engines that are not a Dispatcher (fakes in
// tests). Its Responses report their Outcome as given and no usage.
func NewTicketFunc(call func(context.Context, *Request) (*Response, error)) *Ticket {
	return &Ticket{call: call}
}

// Priority returns the class the ticket was admitted in (Normal for a
// NewTicketFunc ticket).
func (t *Ticket) Priority() llm.Priority {
	if t.w == nil {
		return llm.Normal
	}
	return t.w.item.Class
}

// Probe reports whether the ticket carries a half-open breaker's probe:
// its call tests the upstream's health.
func (t *Ticket) Probe() bool { return t.g.probe }

// Release gives an unused ticket back: its slot, its whole reservation
// and the breaker's permission (as a neutral result). Releasing a used or
// released ticket does nothing.
func (t *Ticket) Release() {
	if !t.spend() || t.call != nil {
		return
	}
	t.d.release(t.w, t.g, flow.Neutral, t.w.cost)
}

func (t *Ticket) spend() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.spent {
		return false
	}
	t.spent = true
	return true
}

// Call makes exactly one upstream attempt with req and the ticket's
// admission: no retry, no putting back, no sleep. It first moves the
// reservation from the ticket's estimate to req.Cost: a surplus is refunded
// at once; an extra that does not fit now gives the ticket back and
// returns an *Error with ErrNotAdmitted (nothing sent; RetryAfter says
// when it would fit). Otherwise it returns the Response (a 2xx, or a
// terminal provider error passed through with its body buffered; its
// Outcome says which) or an *Error with ErrCallFailed whose Outcome is the
// failed call's. Either way the call is recorded (quota headers, breaker,
// adaptive concurrency, rate-limit pause) exactly as in Do. The caller must
// close the Response's Body.
func (t *Ticket) Call(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		t.Release()
		return nil, errors.New("calling with a ticket: nil request")
	}
	if !t.spend() {
		return nil, errTicketUsed
	}
	if t.call != nil {
		return t.call(ctx, req)
	}
	d, w := t.d, t.w
	now := d.clk.Now()
	// The same estimate keeps the reservation it was admitted with,
	// however the calibration moved since.
	real := w.full
	if req.Cost != w.req.Cost {
		est := d.cal.adjust(req.Cost)
		real = flow.NewAmount(est.InputTokens, est.OutputTokens)
	}
	// What the provider will count on the ticket's key: the prefix the key
	// holds in its cache is not charged (prompt_cache.go).
	req.Priority = w.item.Class
	w.req, w.full, w.cache = req, real, d.cacheOf(req)
	w.pin = d.responseKey(ctx, req.Cost.PreviousResponseID, now)
	// The ticket was admitted before its request was known: the key its
	// request belongs on (its session's, its prefix's, its response's) is
	// chosen now, by the rule live requests are placed by (reseat).
	if moved, err := d.reseat(w, &t.g, now); err != nil || moved {
		if err != nil {
			return nil, err
		}
		return t.exchange(ctx)
	}
	real = d.costOn(t.g.key, w, now)
	var extra, surplus flow.Amount
	for i, v := range real.Sub(w.cost) {
		if v > 0 {
			extra[i] = v
		} else {
			surplus[i] = -v
		}
	}
	k := t.g.key
	k.withdraw(w, surplus, now)
	w.cost = w.cost.Sub(surplus)
	if extra != (flow.Amount{}) {
		wait, _, err := k.room(extra, flow.Keep{}, now)
		if err == nil && wait == 0 && !k.reserve(extra, flow.Keep{}, now) {
			wait = time.Millisecond // taken under us: soon
		}
		if err != nil || wait > 0 {
			d.release(w, t.g, flow.Neutral, w.cost)
			reason, msg := ErrNotAdmitted, fmt.Sprintf("the request's cost exceeds the ticket's by %v and fits in %v", extra, wait.Round(time.Millisecond))
			if err != nil {
				reason, msg = ErrTooLarge, err.Error()
			}
			return nil, &Error{Reason: reason, Status: statusForNotSent(reason), Type: errorTypeFor(d.cfg.Protocol, statusForNotSent(reason)),
				Message: msg, RetryAfter: wait}
		}
		w.cost = w.cost.Add(extra)
	}
	return t.exchange(ctx)
}

// exchange is the end of Call: the one attempt, with the ticket's key and
// w.cost reserved on it.
func (t *Ticket) exchange(ctx context.Context) (*Response, error) {
	d, w := t.d, t.w
	x, err := d.exchange(ctx, w, t.g)
	if err != nil || x.resp != nil {
		return x.resp, err
	}
	out := x.out
	if x.keyOut {
		// The key was taken out of the pool: nothing the job did, so it is
		// handed back as not sent (no attempt burnt) for another key.
		msg, wait := "the pool's key was taken out ("+describe(out)+"); placed on another key", time.Duration(0)
		d.mu.Lock()
		if all, probeAt := d.keysOut(); all {
			msg = "the provider rejected every key of the pool (" + describe(out) + "); held for the next key probe"
			wait = max(probeAt.Sub(d.clk.Now()), 0)
		}
		d.mu.Unlock()
		return nil, &Error{Reason: ErrNotAdmitted, Status: statusForNotSent(ErrNotAdmitted), Type: errorTypeFor(d.cfg.Protocol, 429),
			Message: msg, RetryAfter: wait, Attempts: 1, QueueWait: w.queueWait}
	}
	w.last = &out
	if x.errResp != nil && DecideFate(FateParams{Sent: true, Outcome: out}).Kind == Terminal {
		return &Response{Response: x.errResp, QueueWait: w.queueWait, Attempts: 1, Outcome: out, Protocol: t.d.cfg.Protocol,
			Upstream: d.cfg.Name, Key: t.g.key.cred.Load().fp}, nil
	}
	status := statusForGiveUp(&out)
	return nil, &Error{Reason: ErrCallFailed, Status: status, Type: errorTypeFor(d.cfg.Protocol, status),
		Message: describe(out), RetryAfter: out.RetryAfter, Attempts: 1, QueueWait: w.queueWait, Last: &out}
}

func statusForNotSent(reason error) int {
	if errors.Is(reason, ErrTooLarge) {
		return 413
	}
	return 429
}

// Unavailable reports whether the upstream is in an outage now: its
// breaker is open, or half-open with every probe out, or the provider
// rejected every key of its pool (keysOut). A caller with somewhere else
// to go (a fallback) asks before Do or Acquire.
func (d *Dispatcher) Unavailable() bool {
	if ok, _ := d.brk.Ready(d.clk.Now()); !ok {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out, _ := d.keysOut()
	return out
}

// reseat moves a ticket's admission g to the key its request w belongs
// on, now that the request is known: a ticket is admitted on the key with
// the most room before its job is claimed, so its session's key, the key
// holding its prefix or the key that created the Response it continues
// (w.pin) is chosen at its call, by the rule live requests are placed by
// (pick) with the ticket's own reservation given back first. It reports
// whether w now holds a reservation of its real cost (w.cost) on g.key,
// moved or not; false with no error leaves the ticket as it was (its key
// is the one the request belongs on, or it is a key's probe). When no key
// takes the request now (its session's key has room only later, before
// the call's deadline: the earlier of the request's and its class's
// max_wait; or its real cost fits nowhere now) the ticket is given back
// and the error is ErrNotAdmitted with the wait, so a job waits queued in
// the store, never under its lease.
func (d *Dispatcher) reseat(w *waiter, g *admission, now time.Time) (bool, error) {
	if len(d.keys) < 2 || g.key == nil || g.keyProbe {
		return false, nil
	}
	d.mu.Lock()
	want := w.pin
	if want == nil {
		want, _ = d.affine(w, now)
	}
	if want == nil || want == g.key {
		d.mu.Unlock()
		return false, nil
	}
	// The ticket's reservation and slot on its key are given back, so
	// that key competes on equal terms.
	old := g.key
	old.withdraw(w, w.cost, now) // never sent there
	if old.out {
		old.probing = false
	}
	old.answered(w)
	old.inflight--
	class := w.item.Class
	deadline := w.deadline
	w.deadline = now.Add(d.cfg.MaxWait[class])
	if dl := w.req.Deadline; !dl.IsZero() && dl.Before(w.deadline) {
		w.deadline = dl
	}
	w.cost = w.full
	k, wait, err := d.pick(w, d.headroom(class, now), now)
	w.deadline = deadline
	if k != nil {
		k.inflight++
		k.noteReserved(w, now)
		g.key = k
		d.mu.Unlock()
		return true, nil
	}
	// Nothing reserved: the ticket goes back whole (its slot, the
	// breaker's permission; release frees the old key's slot again).
	old.inflight++
	w.cost = flow.Amount{}
	d.mu.Unlock()
	d.release(w, *g, flow.Neutral, flow.Amount{})
	if err != nil {
		return false, &Error{Reason: ErrTooLarge, Status: statusForNotSent(ErrTooLarge), Type: errorTypeFor(d.cfg.Protocol, statusForNotSent(ErrTooLarge)),
			Message: err.Error()}
	}
	if wait <= 0 {
		wait = time.Second // until a completion: look again soon
	}
	return false, &Error{Reason: ErrNotAdmitted, Status: statusForNotSent(ErrNotAdmitted), Type: errorTypeFor(d.cfg.Protocol, 429),
		Message: fmt.Sprintf("the request's key (its session's, its prefix's or its response's) has room in %v", wait.Round(time.Millisecond)), RetryAfter: wait}
}
