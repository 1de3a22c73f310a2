package dispatch

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// The admission step: the dispatcher's one goroutine (loop) sends the
// scheduler's head when the breaker allows, a concurrency slot is free,
// its client's Gate lets it go and a key's buckets have room for its cost
// (leaving the more urgent classes' headroom), and otherwise sleeps on
// the clock until the earliest instant that could change that. Its answer
// to a waiter is an admission.

// kick wakes the admission loop without blocking.
func (d *Dispatcher) kick() {
	d.kicks.Add(1)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop is the admission goroutine.
func (d *Dispatcher) loop(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		handled := d.kicks.Load()
		sleep := d.admit()
		var fire <-chan time.Time
		if sleep > 0 {
			if timer == nil {
				timer = d.clk.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			fire = timer.C()
		}
		d.setParked(true, sleep, handled)
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-fire:
		}
		d.setParked(false, 0, handled)
		if timer != nil {
			timer.Stop()
		}
	}
}

// setParked records whether the loop is waiting, for how long, and the
// wake-ups it had seen before its last look at the queue.
func (d *Dispatcher) setParked(parked bool, sleep time.Duration, handled uint64) {
	d.park.Lock()
	defer d.park.Unlock()
	d.park.parked, d.park.until, d.park.handled = parked, time.Time{}, handled
	if parked && sleep > 0 {
		d.park.until = d.clk.Now().Add(sleep)
	}
}

// admit sends every request it can and returns how long to sleep before
// trying again (0: until woken).
func (d *Dispatcher) admit() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.state == running {
		now := d.clk.Now()
		it := d.sched.Peek(now)
		if it == nil {
			return untilRelease(d.sched.NextRelease(now), now) // nothing, or only held clients
		}
		w := it.Value.(*waiter)
		if ok, readyAt := d.brk.Ready(now); !ok {
			if readyAt.IsZero() {
				return 0 // half-open with every probe out: wait for a result
			}
			if d.failUnreachable(readyAt) > 0 {
				continue // the head may have gone
			}
			return max(readyAt.Sub(now), time.Nanosecond)
		}
		if out, probeAt := d.keysOut(); out && probeAt.After(now) && d.failKeysOut(probeAt) > 0 {
			continue // every key rejected: the live requests are answered now
		}
		if d.inflight >= d.aimd.Limit() {
			return 0 // a completion wakes us
		}
		if gw, err := d.gate(w, now); err != nil {
			d.sched.Remove(it)
			w.admission <- admission{err: err}
			continue
		} else if gw.Waits() {
			// Its client's own limit: the client's requests are passed
			// over until then (or until one of them ends).
			var until time.Time
			if gw.For > 0 {
				until = now.Add(gw.For)
			}
			d.sched.Hold(it, until)
			continue
		}
		keep := d.admitKeep(it, now)
		key, wait, err := d.pick(w, keep, now)
		if err != nil {
			// Limits learned from headers after it was queued make it too large.
			d.sched.Remove(it)
			w.admission <- admission{err: err}
			continue
		}
		var past *flow.Item // the head a request of its class goes past
		if key == nil {
			if keep.Strict && d.keptOut(w, keep, now) {
				// It waits for the room to loosen, not for refill.
				wait = min(wait, max(d.looseAt(it, now).Sub(now), time.Nanosecond))
			}
			other, okey := d.urgentFit(it, now)
			if other == nil {
				var soon time.Duration
				if other, okey, soon = d.passFit(it, keep, wait, now); other != nil {
					past = it
				} else if soon > 0 && soon < wait {
					wait = soon // a request behind it fits its claim then
				}
			}
			if other == nil {
				if r := untilRelease(d.sched.NextRelease(now), now); r > 0 && r < wait {
					return r // a held client, maybe of a more urgent class, may go first
				}
				return wait
			}
			it, w, key = other, other.Value.(*waiter), okey
		}
		state, _ := d.brk.State(now)
		gen, err := d.brk.Allow(now)
		if err != nil {
			d.unpick(key, w.cost, now)
			continue // the state moved under us; Ready will say what to wait for
		}
		if past != nil {
			d.sched.TakePast(it, past)
		} else {
			d.unclaim(it)
			d.sched.Take(it)
		}
		d.inflight++
		key.inflight++
		key.noteReserved(w, now)
		d.noteAdmitted(w)
		w.admission <- admission{gen: gen, at: now, probe: state == flow.HalfOpen, key: key, keyProbe: key.out, reserved: w.cost}
	}
	return 0
}

// untilRelease is how long from now until next (0 when next is zero).
func untilRelease(next, now time.Time) time.Duration {
	if next.IsZero() {
		return 0
	}
	return max(next.Sub(now), time.Nanosecond)
}

// failUnreachable answers at once, with ErrUnavailable, every queued
// request whose deadline ends before the open breaker's next probe at
// readyAt: waiting could only end in the same answer later. It scans once
// per readyAt and returns how many it removed. d.mu must be held.
func (d *Dispatcher) failUnreachable(readyAt time.Time) int {
	return d.failQueued(readyAt, func(w *waiter) bool { return w.deadline.Before(readyAt) })
}

// failKeysOut is failUnreachable while the provider rejects every key of
// the pool, until the next key probe at probeAt: every live request is
// answered now (a rejected key seldom comes back by itself; an operator
// replaces it), a ticket (a job) waits for the probe unless its deadline
// ends first. A live request arriving when a probe is due is the probe.
func (d *Dispatcher) failKeysOut(probeAt time.Time) int {
	return d.failQueued(probeAt, func(w *waiter) bool { return !w.ticket || w.deadline.Before(probeAt) })
}

// failQueued removes the queued requests gone says cannot wait for at and
// answers them with ErrUnavailable, once per at. d.mu must be held.
func (d *Dispatcher) failQueued(at time.Time, gone func(*waiter) bool) int {
	if at.Equal(d.unreachableScan) {
		return 0
	}
	d.unreachableScan = at
	removed := d.sched.RemoveIf(func(it *flow.Item) bool { return gone(it.Value.(*waiter)) })
	for _, it := range removed {
		it.Value.(*waiter).admission <- admission{err: ErrUnavailable}
	}
	return len(removed)
}

// headroom is what a request of class c must leave unused in each
// bucket: the room learned for the more urgent classes' bursts (capped at
// burst_room of the depth, HighRoomShare of that for high), and its configured headroom while a more
// urgent class has sent a request within HeadroomWindow; traffic of one
// class alone uses the whole bucket. d.mu must be held.
func (d *Dispatcher) headroom(c llm.Priority, now time.Time) flow.Keep {
	if u, ok := d.saturating(c, now); ok {
		return d.headroom(u, now) // its room is no use against u (saturation.go)
	}
	k := flow.Keep{Seconds: d.room.Seconds(c, now), Cap: d.cfg.RoomCap}
	if c == llm.High {
		// An interactive class: it leaves critical a smaller room.
		k.Cap *= HighRoomShare
	}
	for u := llm.Critical; u < c; u++ {
		if !d.seen[u].IsZero() && now.Sub(d.seen[u]) < d.activeWindow(u) {
			k.Share = d.cfg.Headroom[c]
			break
		}
	}
	return k
}

// activeWindow is how long after its last request class u still counts
// as active for the lower classes' headroom: headroom_window, cut to
// HeadroomGaps of its usual inter-arrival time (never below
// HeadroomMinWindow) once it has one. A class that arrived steadily and
// stopped is over well before a minute: the headroom it kept would be
// refill lost at the end of the drain. d.mu held.
func (d *Dispatcher) activeWindow(u llm.Priority) time.Duration {
	win := d.cfg.HeadroomWindow
	if g := d.gap[u]; g > 0 || d.gapKnown(u) {
		win = min(win, max(HeadroomGaps*g, HeadroomMinWindow))
	}
	return win
}

// gapKnown reports whether class u has arrived at least twice. d.mu held.
func (d *Dispatcher) gapKnown(u llm.Priority) bool { return d.arrivals[u] >= 2 }

// arrived records an arrival of class c costing cost at now: for the
// headroom's activity window and the room learned for bursts (in seconds
// of the pool's refill). d.mu held.
func (d *Dispatcher) arrived(c llm.Priority, cost flow.Amount, now time.Time) {
	d.queued(c, now)
	if c < llm.NumPriorities-1 && d.cfg.RoomCap > 0 {
		d.room.Arrive(c, cost, d.poolRate(now), now)
	}
	if prev := d.seen[c]; !prev.IsZero() {
		g := max(now.Sub(prev), 0)
		if d.arrivals[c] < 2 {
			d.gap[c] = g
		} else {
			d.gap[c] += (g - d.gap[c]) / 8
		}
	}
	d.arrivals[c]++
	d.seen[c] = now
}

// urgentFit is called when head must wait for its buckets to refill. A
// more urgent class's next request that fits now, within its own (smaller)
// headroom, goes first and its cost is reserved: this is what the headroom
// is for. The head keeps its turn otherwise, and an overdue head (past its
// class's max wait) is never overtaken. d.mu must be held.
func (d *Dispatcher) urgentFit(head *flow.Item, now time.Time) (*flow.Item, *poolKey) {
	if d.sched.Overdue(head, now) {
		return nil, nil
	}
	for c := llm.Critical; c < head.Class; c++ {
		it := d.sched.PeekClass(c, now)
		if it == nil {
			continue
		}
		w := it.Value.(*waiter)
		if gw, err := d.gate(w, now); err != nil || gw.Waits() {
			continue // the next admission step holds it back, or fails it
		}
		if k, _, err := d.pick(w, d.admitKeep(it, now), now); err == nil && k != nil {
			return it, k
		}
	}
	return nil, nil
}

// admission is the admission step's answer to a waiter: the attempt it
// may make now (under breaker generation gen, on key, with reserved
// counted), or err when the dispatcher gives up on it. (A cluster's
// "grant" is what a node is given at a sync; see internal/cluster.)
type admission struct {
	gen uint64
	at  time.Time
	err error
	// probe marks an attempt the half-open breaker let through to test
	// the upstream's health.
	probe bool
	// key is the pool's key the attempt is sent with; its cost is
	// reserved in that key's buckets (and its org's). keyProbe is set
	// when the key was out of the pool: the attempt is its probe.
	key      *poolKey
	keyProbe bool
	// reserved is the estimate counted in Dispatcher.reserved while the
	// attempt is in flight.
	reserved flow.Amount
}
