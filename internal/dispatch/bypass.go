package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// Going past a waiting head (docs/engine.md, "Heavy tails: going past a
// waiting head"). When the head of the queue must wait for its buckets
// to refill, later requests of its class that fit now may be admitted
// past it, each leaving the head's claim (flow.Limiter.Claim): what the
// buckets held when it began waiting plus (1 − flow.BypassShare) of the
// refill since, up to what it needs. So the head is admitted at most
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

// admitKeep is what queued request it must leave unused when admitted
// at now: its class's headroom, strict (a cost too big to leave it does
// not go at a full bucket, flow.Keep.Strict) until it loosens
// (looseAt). d.mu must be held.
func (d *Dispatcher) admitKeep(it *flow.Item, now time.Time) flow.Keep {
	k := d.headroom(it.Class, now)
	k.Strict = !d.looseRoom && now.Before(d.looseAt(it, now))
	return k
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
