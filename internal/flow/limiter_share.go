package flow

import (
	"math"
	"time"
)

// MinShare is the smallest share SetShare applies: a node always keeps a
// sliver of every bucket, so a request arriving at an idle node is
// admitted (slowly) before the next share is granted.
const MinShare = 1e-4

// SetShare makes this Limiter use f, in (0, 1], of every bucket's rate and
// depth: the part of an upstream's quota a node of a cluster was granted
// (internal/cluster). It is distinct from Throttle's refill-rate cut; the
// two multiply.
//
// The change keeps what the node may send over any window within
// share × (rate·t + depth): every bucket is first settled at the old
// share's rate; lowering the share drops the tokens above the new depth
// (they belong to the capacity given back); raising it adds capacity that
// starts empty and fills at the new rate, and the tokens held stay capped
// at the old depth. So when the shares of all nodes sum to at most 1, the
// cluster's emission over any window stays within rate·t + depth. Requests
// larger than the depth keep their usual allowance (they may accumulate up
// to their own cost). Values outside (0, 1] are clamped.
func (l *Limiter) SetShare(f float64, now time.Time) {
	if math.IsNaN(f) {
		return
	}
	f = math.Min(math.Max(f, MinShare), 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	if f == l.share {
		return
	}
	keep := math.Min(f, l.share)
	for i := range l.b {
		b := &l.b[i]
		b.settle(now)
		if b.capacity > 0 {
			b.level = math.Min(b.level, b.depth*keep)
		}
		b.share = f
		b.last = now
	}
	l.share = f
}

// Share returns the share SetShare last applied (1 by default).
func (l *Limiter) Share() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share
}

// Debited returns the running sum of every debit since the Limiter was
// made (see Mark): a cluster node's recent use is the difference between
// two readings.
func (l *Limiter) Debited() Amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.debited
}
