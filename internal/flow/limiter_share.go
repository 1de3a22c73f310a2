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
// (internal/cluster). It is distinct from SlowDown's refill-rate cut; the
// two multiply. Values outside (0, 1] are clamped.
//
// Every bucket is first settled at the old share's rate; lowering the
// share drops the tokens above the new depth, raising it adds capacity
// that starts empty and fills at the new rate. So the node sends at most
// share × (rate·t + depth) over any window, and when the shares of all
// nodes sum to at most 1 the cluster stays within rate·t + depth
// (docs/cluster.md, "How it works"). Requests larger than the depth keep
// their usual allowance (they may accumulate up to their own cost).
//
// It returns what the change dropped, as a fraction of the whole burst
// (BurstFill): the least over the limited dimensions of the usable tokens
// dropped over that dimension's burst depth (0 when raising). A cluster
// gives that much back to its burst pool (Credit).
func (l *Limiter) SetShare(f float64, now time.Time) (dropped float64) {
	if math.IsNaN(f) {
		return 0
	}
	f = math.Min(math.Max(f, MinShare), 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets
	s.refresh(now)
	if f == s.share {
		return 0
	}
	keep := math.Min(f, s.share)
	dropped = math.Inf(1)
	for i := range s.b {
		b := &s.b[i]
		b.settle(now)
		if b.capacity > 0 {
			before := math.Max(math.Min(b.level, b.dep()), 0)
			b.level = math.Min(b.level, b.depth*keep)
			after := math.Max(math.Min(b.level, b.depth*keep), 0)
			dropped = math.Min(dropped, (before-after)/s.burstDepth(b))
		}
		b.share = f
		b.last = now
	}
	s.share = f
	if math.IsInf(dropped, 1) || !(dropped > 0) {
		return 0
	}
	return math.Min(dropped, 1)
}

// burstDepth is a bucket's whole burst depth, whatever the share: the
// depth the provider's bucket is assumed to hold when it is full
// (BurstSeconds less the jitter allowance, as a fresh Limiter starts).
// Credits and what SetShare drops are counted in fractions of it.
func (s *bucketSet) burstDepth(b *bucket) float64 {
	return math.Max(s.initialDepth(b.capacity), 1e-9)
}

// Credit adds f (a fraction, in [0, 1]) of every limited bucket's whole
// burst depth (burstDepth) to its level, capped at this node's depth (its
// share of the bucket's): a node of a cluster granted part of the
// cluster's burst pool (internal/cluster). The cap keeps the cluster
// within rate·t + depth once the pool is spent (docs/cluster.md, "The
// burst pool"). A level already above the depth (a large request
// accumulating) is left as it is.
func (l *Limiter) Credit(f float64, now time.Time) {
	if !(f > 0) {
		return
	}
	f = math.Min(f, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets
	s.refresh(now)
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		b.level = math.Max(b.level, math.Min(b.level+f*s.burstDepth(b), b.dep()))
	}
}

// BurstFill returns the buckets' fill for a cluster's burst pool: level is
// the least, over the limited dimensions, of the usable level over the
// whole burst depth (burstDepth; so a node at share s with full buckets
// is at s), and seconds the least time the whole rate takes to refill a
// whole burst depth (the pool's decay: the cluster's buckets together
// refill no faster). Both are 0 when no dimension is limited.
func (l *Limiter) BurstFill(now time.Time) (level, seconds float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets
	s.refresh(now)
	level, seconds = math.Inf(1), math.Inf(1)
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 {
			continue
		}
		level = math.Min(level, b.at(now, b.dep())/s.burstDepth(b))
		seconds = math.Min(seconds, s.burstDepth(b)/(b.capacity/60))
	}
	if math.IsInf(level, 1) {
		return 0, 0
	}
	return math.Min(math.Max(level, 0), 1), seconds
}

// BurstDepth returns every limited bucket's whole burst depth (0 when
// the dimension is not limited).
func (l *Limiter) BurstDepth() [NumDims]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d [NumDims]float64
	for i := range l.buckets.b {
		if b := &l.buckets.b[i]; b.capacity > 0 {
			d[i] = l.buckets.burstDepth(b)
		}
	}
	return d
}

// Share returns the share SetShare last applied (1 by default).
func (l *Limiter) Share() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buckets.share
}

// Debited returns the running sum of every debit since the Limiter was
// made (see Mark): a cluster node's recent use is the difference between
// two readings.
func (l *Limiter) Debited() Amount {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.est.debited
}
