package dispatch

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Gate is a caller's own limits on the upstream: a client's requests and
// tokens per minute and its concurrency (internal/admit implements it).
// The admission step checks it beside the upstream's quota, so a request
// over its client's limit waits in the upstream's one queue, where it is
// counted, timed (x-sluice-queue-ms), shed when its wait would pass its
// deadline and explained (Explain.Held) like any other wait, while the
// other clients' requests go ahead of it.
//
// The dispatcher calls Take under its own lock, once per request (a retry
// is the same request), and Done exactly once for every request Take
// admitted. Implementations are safe for concurrent use.
type Gate interface {
	// Take charges one request of cost (the provider's estimate: input
	// plus max_tokens) and takes a slot when the gate has room at now;
	// otherwise it charges nothing and says what holds the request back.
	// An error means the cost can never fit the gate.
	Take(cost provider.Cost, now time.Time) (GateWait, error)
	// Done ends a request Take admitted: its slot is freed and its charge
	// corrected to how it ended.
	Done(cost provider.Cost, end GateEnd, now time.Time)
	// Predict is how long until demand (requests, and tokens of input
	// plus max_tokens) fits the gate's rates at now, slots aside, and the
	// limit that binds: the basis for shedding at once a request its
	// client's limit would hold past its deadline.
	Predict(requests, tokens float64, now time.Time) (time.Duration, string)
}

// GateWait is what holds a request back at its Gate. The zero value means
// it was admitted.
type GateWait struct {
	// For is how long until the gate's rates have room; zero with Slot
	// set means until one of the caller's requests ends.
	For time.Duration
	// Slot is set when every one of the caller's slots is taken.
	Slot bool
	// Limit names the limit that holds it back, for the client and for
	// operators: "client acme's requests_per_minute (30) on claude".
	Limit string
}

// Waits reports whether w holds a request back.
func (w GateWait) Waits() bool { return w.For > 0 || w.Slot }

// GateEnd is how a request a Gate admitted ended.
type GateEnd struct {
	// Sent is set when an attempt reached (or may have reached) the
	// provider: the request counts against the caller's rate.
	Sent bool
	// Usage is what the provider reported, when it did: the tokens are
	// charged as used. Without it a request that was sent keeps its
	// charge, and one that was not is refunded.
	Usage *llm.Usage
}

// ErrClientLimit means the caller's own limit (its Gate) holds the
// request past its deadline: its client is over its own rate or
// concurrency limit, not the upstream. It is answered 429 rate_limit_error
// with retry-after from the client's own room.
var ErrClientLimit = errors.New("over the client's own limit")

// gate is the admission step's check of w's Gate: admitted (or no gate),
// or what holds it back. It charges the gate once per request. d.mu held.
func (d *Dispatcher) gate(w *waiter, now time.Time) (GateWait, error) {
	g := w.req.Gate
	if g == nil || w.gated {
		return GateWait{}, nil
	}
	gw, err := g.Take(w.req.Cost, now)
	if err != nil || gw.Waits() {
		w.held = gw
		return gw, err
	}
	w.gated, w.held = true, GateWait{}
	return GateWait{}, nil
}

// gateDone ends w's gate charge, once, and lets the client's other
// requests held for a slot go. Safe without d.mu.
func (d *Dispatcher) gateDone(w *waiter, end GateEnd) {
	if w.req.Gate == nil {
		return
	}
	w.gateOnce.Do(func() {
		d.mu.Lock()
		gated := w.gated
		d.mu.Unlock()
		if !gated {
			return
		}
		w.req.Gate.Done(w.req.Cost, end, d.clk.Now())
		d.mu.Lock()
		d.sched.Release(w.item.Client)
		d.mu.Unlock()
		d.kick()
	})
}
