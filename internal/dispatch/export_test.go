package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// LoopIdle reports whether d's admission loop has acted on everything it
// was told: it is waiting, with no wake-up pending and its timer (if any)
// not yet due on the clock. With every caller blocked where a test can see
// it, the engine then does nothing until the clock moves.
func LoopIdle(d *Dispatcher) bool {
	d.park.Lock()
	defer d.park.Unlock()
	return d.park.parked && d.park.handled == d.kicks.Load() &&
		(d.park.until.IsZero() || d.clk.Now().Before(d.park.until))
}

// LoopTimers is how many fake-clock timers d's admission loop holds: 1
// while it is parked until an instant not yet reached, else 0. A harness
// that waits until every request in flight sleeps on the clock counts
// the timers beyond this one.
func LoopTimers(d *Dispatcher) int {
	d.park.Lock()
	defer d.park.Unlock()
	if d.park.parked && !d.park.until.IsZero() && d.clk.Now().Before(d.park.until) {
		return 1
	}
	return 0
}

// PickAndGiveBack places a request of cost on a key of d's pool and gives
// the reservation back: the key selection, for its benchmark.
func PickAndGiveBack(d *Dispatcher, cost flow.Amount) bool {
	now := d.clk.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	w := &waiter{req: &Request{}, cost: cost, full: cost, deadline: now.Add(time.Minute)}
	k, _, _ := d.pick(w, flow.Keep{}, now)
	if k == nil {
		return false
	}
	d.unpick(k, w.cost, now)
	return true
}

// Overshoot exposes the 429 cause classification.
var Overshoot = overshoot

// LooseRoom lets a request too big to leave the room kept for the more
// urgent classes take it at once at a full bucket: the old behaviour,
// for tests that compare.
func LooseRoom(d *Dispatcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.looseRoom = true
}

// NoBypass turns off going past a waiting head (bypass.go): the old
// behaviour, for tests that compare.
func NoBypass(d *Dispatcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.noBypass = true
}
