package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// Going past a waiting head (docs/engine.md, "Heavy tails: going past a
// waiting head"). When the head of the queue must wait for its buckets
// to refill, later requests of its class that fit now may be admitted
// past it within the head's claim (flow.Limiter.Claim): everything
// reserved while it waits, the more urgent classes' admissions first,
// stays within flow.BypassShare of the refill since it began waiting
// plus what it did not need then. So the head is admitted at most
// 1/(1 − BypassShare) times as late as alone, and never starved. An
// overdue head is never passed, nor one the passing could make miss its
// deadline.

// BypassScan bounds how many requests behind a waiting head are tried
// at each admission step.
const BypassScan = 16

// passFit is called when head, of keep, must wait wait for its buckets
// to refill (after the more urgent classes were tried: urgentFit). It
// claims the buckets for head and returns the first request of head's
// class behind it that fits now within head's claim, its cost reserved;
// else nil and how soon one of them would (0: none will by refill
// alone). d.mu must be held.
func (d *Dispatcher) passFit(head *flow.Item, keep flow.Keep, wait time.Duration, now time.Time) (*flow.Item, *poolKey, time.Duration) {
	if d.noBypass || wait <= 0 || d.sched.Overdue(head, now) {
		return nil, nil, 0
	}
	hw := head.Value.(*waiter)
	if bound := time.Duration(float64(wait) / (1 - flow.BypassShare)); now.Add(bound).After(hw.deadline) {
		return nil, nil, 0 // it keeps the whole refill: passing it could cost it its deadline
	}
	d.claim(head, hw, keep, now)
	var soonest time.Duration
	for _, it := range d.sched.Behind(head, now, BypassScan) {
		w := it.Value.(*waiter)
		if gw, err := d.gate(w, now); err != nil || gw.Waits() {
			continue // its turn as the head holds it back, or fails it
		}
		k := d.admitKeep(it, now)
		k.Past = true
		key, kw, err := d.pick(w, k, now)
		if err == nil && key != nil {
			return it, key, 0
		}
		if kw > 0 && (soonest == 0 || kw < soonest) {
			soonest = kw
		}
	}
	return nil, nil, soonest
}

// claim records on every limiter of the pool that head waits for refill
// (flow.Limiter.Claim), at its cost on each key. d.mu must be held.
func (d *Dispatcher) claim(head *flow.Item, w *waiter, keep flow.Keep, now time.Time) {
	d.claimed = head
	for _, k := range d.keys {
		cost := d.costOn(k, w, now)
		k.lim.Claim(head, cost, keep, now)
		if k.org != nil {
			k.org.lim.Claim(head, cost, keep, now)
		}
	}
}

// unclaim ends head's claim when it leaves the queue's head (admitted).
// d.mu must be held.
func (d *Dispatcher) unclaim(head *flow.Item) {
	if d.claimed == nil || d.claimed != head {
		return
	}
	d.claimed = nil
	for _, k := range d.keys {
		k.lim.Unclaim()
		if k.org != nil {
			k.org.lim.Unclaim()
		}
	}
}
