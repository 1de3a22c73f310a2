package flow

import (
	"math"
	"time"
)

// Room returns how long until cost fits while leaving keep (as
// ReserveKeeping) and, when it fits now (wait 0), how much room would be
// left after it: the smallest share of a bucket's capacity left over
// across the limited dimensions (+Inf when no dimension is limited). A
// key pool places a request on the key with the most room. ErrTooLarge
// when the cost never fits.
func (l *Limiter) Room(cost Amount, keep float64, now time.Time) (time.Duration, float64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	// One pass: timeUntil's checks and waits, and the room left.
	var w time.Duration
	room := math.Inf(1)
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 || cost[i] <= 0 {
			continue
		}
		if cost[i] > b.capacity {
			_, err := l.timeUntil(cost, keep, now)
			return 0, 0, err
		}
		c := math.Max(b.depth, cost[i])
		need := math.Min(cost[i]+keep*math.Min(b.depth, l.initialDepth(b.capacity)), c)
		lvl := b.at(now, c)
		if lvl < need {
			w = max(w, secs((need-lvl)/b.rate()))
			continue
		}
		room = math.Min(room, (lvl-cost[i])/b.capacity)
	}
	if p := l.pausedUntil.Sub(now); p > w {
		w = p
	}
	if w > 0 {
		return w, 0, nil
	}
	return 0, room, nil
}

// Supply is what a Limiter can give over time, for predicting the wait of
// demand spread over several limiters: per dimension, the level now
// (capped at the capacity, as WaitFor reads it) and the refill rate per
// second (0 for an unlimited dimension), and the end of the pause.
type Supply struct {
	Level       Amount
	Rate        Amount
	PausedUntil time.Time
}

// Supply returns the Limiter's supply at now.
func (l *Limiter) Supply(now time.Time) Supply {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	s := Supply{PausedUntil: l.pausedUntil}
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 {
			continue
		}
		s.Level[i] = b.at(now, b.capacity)
		s.Rate[i] = b.rate()
	}
	return s
}
