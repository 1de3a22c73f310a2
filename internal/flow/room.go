package flow

import (
	"math"
	"time"
)

// Keep is what an admission must leave unused in each bucket: the room
// kept for more urgent classes. The zero Keep keeps nothing.
type Keep struct {
	// Share is a share, in [0, 1), of the bucket's configured burst depth
	// (BurstSeconds less the jitter allowance, at most the depth): the
	// configured headroom.
	Share float64
	// Seconds is, per dimension, the learned room for the urgent classes'
	// bursts in seconds of the bucket's refill (BurstRoom.Seconds).
	Seconds [NumDims]float64
	// Cap bounds the learned room to this share, in [0, 1], of the
	// bucket's depth, so the lower classes keep most of every bucket.
	Cap float64
	// Strict makes a cost too big to leave the keep below a full bucket
	// not fit at all; otherwise it only needs the bucket full. It is set
	// while a more urgent class may need the room soon (docs/engine.md,
	// "Room for bursts").
	Strict bool
	// Past marks an admission that goes past a head of its class waiting
	// for refill: it must also fit the head's claim on the Limiter
	// (Claim), and fit strictly.
	Past bool
}

// strict reports whether a cost too big to leave k does not fit at all.
func (k Keep) strict() bool { return k.Strict || k.Past }

// hold is the tokens k leaves in bucket d: the larger of the
// configured headroom and the learned room (capped).
func (s *bucketSet) hold(d Dim, k Keep) float64 {
	b := &s.b[d]
	h := k.Share * b.roomDepth(s.headroomDepth(b))
	if s := k.Seconds[d]; s > 0 && k.Cap > 0 {
		h = math.Max(h, math.Min(s*b.rate(), k.Cap*b.roomDepth(b.dep())))
	}
	return h
}

// Held returns what keep leaves unused in each limited bucket at now, in
// the dimension's unit (0 for a dimension not limited): for operators.
func (l *Limiter) Held(keep Keep, now time.Time) Amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	var a Amount
	for i := range l.buckets.b {
		if l.buckets.b[i].capacity > 0 {
			a[i] = l.buckets.hold(Dim(i), keep)
		}
	}
	return a
}

// Room returns how long until cost fits while leaving keep (as
// ReserveKeeping) and, when it fits now (wait 0), how much room would be
// left after it: the smallest share of a bucket's capacity left over
// across the limited dimensions (+Inf when no dimension is limited). A
// key pool places a request on the key with the most room. ErrTooLarge
// when the cost never fits.
func (l *Limiter) Room(cost Amount, keep Keep, now time.Time) (time.Duration, float64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets
	s.refresh(now)
	// One pass: timeUntil's checks and waits, and the room left.
	var w time.Duration
	room := math.Inf(1)
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 || cost[i] <= 0 {
			continue
		}
		if cost[i] > b.capacity {
			_, err := s.timeUntil(cost, keep, now)
			return 0, 0, err
		}
		if bw := b.wait(cost[i], s.hold(Dim(i), keep), keep.strict(), now); bw > 0 {
			w = max(w, bw)
			continue
		}
		lvl := b.at(now, math.Max(b.dep(), cost[i]))
		room = math.Min(room, (lvl-cost[i])/b.capacity)
	}
	if keep.Past {
		w = max(w, s.passWait(cost, now))
	}
	if p := s.pausedUntil.Sub(now); p > w {
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
	l.buckets.refresh(now)
	s := Supply{PausedUntil: l.buckets.pausedUntil}
	for i := range l.buckets.b {
		b := &l.buckets.b[i]
		if b.capacity == 0 {
			continue
		}
		s.Level[i] = b.at(now, b.capacity)
		s.Rate[i] = b.rate()
	}
	return s
}
