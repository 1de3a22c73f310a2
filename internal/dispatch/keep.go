package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// What an admission leaves for the more urgent classes: its class's
// headroom and learned room (headroom, in admission.go), strict while a
// burst of theirs may be coming (docs/engine.md, "Room for bursts").

// admitKeep is what queued request it must leave unused when admitted
// at now: its class's headroom, strict (a cost too big to leave it does
// not go at a full bucket, flow.Keep.Strict) until it loosens
// (looseAt). d.mu must be held.
func (d *Dispatcher) admitKeep(it *flow.Item, now time.Time) flow.Keep {
	k := d.headroom(it.Class, now)
	k.Strict = !d.looseRoom && now.Before(d.looseAt(it, now))
	return k
}

// keptOut reports whether w cannot fit keep (strict) on any usable key
// of the pool, its own or its org's buckets, by refill alone. d.mu must
// be held.
func (d *Dispatcher) keptOut(w *waiter, keep flow.Keep, now time.Time) bool {
	for _, k := range d.keys {
		if !k.usable(now) {
			continue
		}
		cost := d.costOn(k, w, now)
		if !k.lim.KeptOut(cost, keep, now) && (k.org == nil || !k.org.lim.KeptOut(cost, keep, now)) {
			return false
		}
	}
	return true
}

// looseAt is when a request too big to leave the room its class keeps
// for the more urgent classes may take it anyway, at a full bucket: once
// every more urgent class has been quiet for its activity window (no
// burst of theirs is about to need the room), or once the request has
// waited half the time its deadline gave it, or its class's max wait
// (aging), whichever comes first. At or before now when it already may.
// d.mu must be held.
func (d *Dispatcher) looseAt(it *flow.Item, now time.Time) time.Time {
	w := it.Value.(*waiter)
	at := it.Arrival.Add(d.cfg.MaxWait[it.Class])
	if half := it.Arrival.Add(w.deadline.Sub(it.Arrival) / 2); half.Before(at) {
		at = half
	}
	var quiet time.Time // when the last active more urgent class goes quiet
	for u := llm.Critical; u < it.Class && u < llm.NumPriorities; u++ {
		if d.seen[u].IsZero() {
			continue
		}
		if end := d.seen[u].Add(d.activeWindow(u)); end.After(now) && end.After(quiet) {
			quiet = end
		}
	}
	if quiet.Before(at) {
		at = quiet
	}
	return at
}
