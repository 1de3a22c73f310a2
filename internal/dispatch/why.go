package dispatch

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// Why a queued request waits: the dispatcher's own account of what holds
// the head of its queue, the breaker's recent history and the last
// throttling answers, for GET /v1/status and the dashboard.

// Reasons a request waits (WaitReason.Reason).
const (
	WaitBreakerOpen = "breaker_open" // the breaker refuses calls until Until
	WaitPaused      = "paused"       // every usable key is paused after a 429 until Until
	WaitConcurrency = "concurrency"  // every slot is taken: a completion frees one
	WaitQuota       = "quota"        // Dimension's bucket refills enough at Until
	// WaitUrgentRoom: Dimension's bucket has room for the request, but
	// not while leaving the room kept for the more urgent classes'
	// bursts; it refills enough at Until.
	WaitUrgentRoom = "urgent_room"
	WaitKeysOut    = "keys_out" // every key is out of the pool until its probe
	// WaitClientLimit: every queued request is held back by its client's
	// own limit; Client and Limit name the hold that lifts first.
	WaitClientLimit = "client_limit"
)

// WaitReason says what the head of the queue waits on. The zero value
// (Reason "") means nothing waits.
type WaitReason struct {
	Reason string
	// Dimension names the bucket short of room (quota only): requests,
	// input_tokens, output_tokens or tokens.
	Dimension string
	// Until is when the cause should lift (zero when unknown: a
	// completion, a probe's answer or an operator frees it).
	Until time.Time
	// Key is the fingerprint of the key the explanation is for: the one
	// of the pool that would take the head soonest.
	Key string
	// Client and Limit name the client and its limit (client_limit only:
	// "client acme's requests_per_minute (30) on claude").
	Client, Limit string
}

// HeldClient is a client whose own limit holds its queued requests back
// in one class.
type HeldClient struct {
	Class  llm.Priority
	Client string
	Queued int
	// Limit names the limit ("client acme's requests_per_minute (30) on
	// claude"); Until is when it has room (zero: when one of the client's
	// requests ends).
	Limit string
	Until time.Time
}

// BreakerEvent is one change of the breaker's state.
type BreakerEvent struct {
	At       time.Time
	From, To flow.BreakerState
	// Cause is "automatic" for the breaker's own transitions, else what
	// an operator did ("operator reset", "operator open").
	Cause string
}

// Throttle is the last answer of a kind that throttles (429, 529).
type Throttle struct {
	At        time.Time
	Status    int
	ErrorType string
	Message   string
	// Hint is the provider's retry-after, valid when HasHint.
	Hint    time.Duration
	HasHint bool
}

// breakerHistoryMax bounds the breaker history kept.
const breakerHistoryMax = 32

// Breaker actions of ForceBreaker.
const (
	BreakerReset = "reset" // close it now (after a fix)
	BreakerOpen  = "open"  // open it and hold it open until a reset
)

// noteThrottle remembers out when it is a rate limit or an overload.
// d.fmu held.
func (d *Dispatcher) noteThrottle(out llm.Outcome, now time.Time) {
	t := Throttle{At: now, Status: out.Status, ErrorType: out.ErrorType, Message: out.Message, Hint: out.RetryAfter, HasHint: out.HasRetryAfter}
	switch out.Kind {
	case llm.Rate:
		d.lastRate = t
	case llm.Overload:
		d.lastOverload = t
	default:
		// Other outcomes do not throttle.
	}
}

// noteBreaker appends an event to the breaker history.
func (d *Dispatcher) noteBreaker(from, to flow.BreakerState, cause string) {
	now := d.clk.Now()
	d.fmu.Lock()
	d.breakerLog = append(d.breakerLog, BreakerEvent{At: now, From: from, To: to, Cause: cause})
	if n := len(d.breakerLog); n > breakerHistoryMax {
		d.breakerLog = append(d.breakerLog[:0], d.breakerLog[n-breakerHistoryMax:]...)
	}
	d.fmu.Unlock()
}

// ForceBreaker resets (closes) or opens the breaker by hand; an opened
// breaker stays open, with no probe, until the next reset. The change is
// counted and reported like any transition (Observer, StateObserver) and
// kept in the breaker history with its cause; by names who asked, for the
// caller's own log line.
func (d *Dispatcher) ForceBreaker(action, by string) (from, to flow.BreakerState, err error) {
	switch action {
	case BreakerReset:
		to = flow.Closed
	case BreakerOpen:
		to = flow.Open
	default:
		return 0, 0, fmt.Errorf("breaker action %q: want %q or %q", action, BreakerReset, BreakerOpen)
	}
	from = d.brk.Force(to, d.clk.Now())
	d.noteBreaker(from, to, "operator "+action)
	if from != to {
		d.obs.BreakerStateChanged(from, to)
		d.cfg.States.BreakerChanged(from, to)
	}
	d.kick()
	return from, to, nil
}

// Explain is the dispatcher's account for operators: what the head of the
// queue waits on, each class's oldest arrival, the breaker's history and
// the last throttling answers.
type Explain struct {
	Waiting WaitReason
	// Held are the clients whose own limit holds their queued requests
	// back (Gate), per class.
	Held           []HeldClient
	OldestArrival  [llm.NumPriorities]time.Time
	BreakerHistory []BreakerEvent
	BreakerHeld    bool
	LastRateLimit  Throttle // 429 (and OpenAI's Slow Down)
	LastOverload   Throttle // 529 / 503 overloaded
}

// Explain returns the dispatcher's account at now.
func (d *Dispatcher) Explain() Explain {
	now := d.clk.Now()
	var e Explain
	e.BreakerHeld = d.brk.Held()
	d.mu.Lock()
	for c := range e.OldestArrival {
		e.OldestArrival[c] = d.sched.OldestArrival(llm.Priority(c))
	}
	e.Waiting = d.whyLocked(now)
	for _, h := range d.sched.HeldClients(now) {
		e.Held = append(e.Held, HeldClient{Class: h.Class, Client: h.Client, Queued: h.Queued,
			Limit: h.Front.Value.(*waiter).held.Limit, Until: h.Until})
	}
	d.mu.Unlock()
	d.fmu.Lock()
	e.BreakerHistory = append([]BreakerEvent(nil), d.breakerLog...)
	e.LastRateLimit, e.LastOverload = d.lastRate, d.lastOverload
	d.fmu.Unlock()
	return e
}

// heldReason explains a queue whose every request is held back by its
// client's own limit (the zero WaitReason when nothing is queued): the hold
// that lifts first, one that lifts when a request ends last. d.mu held.
func (d *Dispatcher) heldReason(now time.Time) WaitReason {
	var r WaitReason
	for _, h := range d.sched.HeldClients(now) {
		if r.Reason == "" || !h.Until.IsZero() && (r.Until.IsZero() || h.Until.Before(r.Until)) {
			r = WaitReason{Reason: WaitClientLimit, Client: h.Client, Limit: h.Front.Value.(*waiter).held.Limit, Until: h.Until}
		}
	}
	return r
}

// whyLocked explains the head of the queue the way admit decides it: the
// breaker, the concurrency limit, then the key that would take it soonest
// (its pause, else the dimension whose bucket is the last to have room).
// d.mu held.
func (d *Dispatcher) whyLocked(now time.Time) WaitReason {
	it := d.sched.Peek(now)
	if it == nil {
		return d.heldReason(now)
	}
	w := it.Value.(*waiter)
	if ok, readyAt := d.brk.Ready(now); !ok {
		return WaitReason{Reason: WaitBreakerOpen, Until: readyAt}
	}
	if d.inflight >= d.aimd.Limit() {
		return WaitReason{Reason: WaitConcurrency}
	}
	keep := d.admitKeep(it, now)
	var best *poolKey
	bestWait := time.Duration(-1)
	full, out := 0, 0
	var probeAt time.Time
	for _, k := range d.keys {
		if !k.usable(now) {
			if k.out {
				out++
				if probeAt.IsZero() || k.probeAt.Before(probeAt) {
					probeAt = k.probeAt
				}
			} else {
				full++
			}
			continue
		}
		wait, _, err := k.room(w.cost, keep, now)
		if err != nil {
			continue
		}
		if bestWait < 0 || wait < bestWait {
			best, bestWait = k, wait
		}
	}
	switch {
	case best == nil && full > 0:
		return WaitReason{Reason: WaitConcurrency}
	case best == nil && out > 0:
		return WaitReason{Reason: WaitKeysOut, Until: probeAt}
	case best == nil, bestWait == 0:
		return WaitReason{} // about to be admitted
	}
	r := WaitReason{Key: best.cred.Load().fp}
	lims := []*flow.Limiter{best.lim}
	if best.org != nil {
		lims = append(lims, best.org.lim)
	}
	for _, l := range lims {
		if p := l.PausedUntil(); p.After(now) && (r.Reason != WaitPaused || p.After(r.Until)) {
			r.Reason, r.Until = WaitPaused, p
		}
	}
	if r.Reason == WaitPaused {
		return r
	}
	var longest time.Duration
	for dim := range flow.NumDims {
		var one flow.Amount
		one[dim] = w.cost[dim]
		if one[dim] <= 0 {
			continue
		}
		for _, l := range lims {
			wait, _, err := l.Room(one, keep, now)
			if err == nil && wait > longest {
				longest = wait
				r.Reason, r.Dimension = WaitQuota, flow.Dim(dim).String()
				if bare, _, err := l.Room(one, flow.Keep{}, now); err == nil && bare == 0 {
					r.Reason = WaitUrgentRoom
				}
			}
		}
	}
	if r.Reason == "" {
		r.Reason = WaitQuota
		longest = bestWait
	}
	r.Until = now.Add(longest)
	if keep.Strict && r.Reason == WaitUrgentRoom {
		// Too big to leave the room: it goes when the room loosens.
		if at := d.looseAt(it, now); at.Before(r.Until) {
			r.Until = at
		}
	}
	return r
}
