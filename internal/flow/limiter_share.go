package flow

import (
	"math"
	"time"
)

// ClusterShare is the part of a Limiter a cluster of nodes shares
// (internal/cluster): this node's share of every bucket (SetShare, Share),
// its part of the cluster's burst pool (Credit, BurstFill, BurstDepth),
// its use (Debited) and the provider's reports (Heard, Adopt,
// limiter_cluster.go). It is a view of its Limiter, under the Limiter's
// lock: the two act on the same buckets. Get one with Limiter.Cluster;
// a gateway that is no cluster node never needs it.
type ClusterShare struct{ l *Limiter }

// Cluster returns l's cluster share.
func (l *Limiter) Cluster() ClusterShare { return ClusterShare{l: l} }

// MinShare is the smallest share SetShare applies: a node always keeps a
// sliver of every bucket, so a request arriving at an idle node is
// admitted (slowly) before the next share is granted.
const MinShare = 1e-4

// SetShare makes the Limiter use f, in (0, 1], of every bucket's rate and
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
func (c ClusterShare) SetShare(f float64, now time.Time) (dropped float64) {
	if math.IsNaN(f) {
		return 0
	}
	f = math.Min(math.Max(f, MinShare), 1)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	s := &c.l.buckets
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
func (c ClusterShare) Credit(f float64, now time.Time) {
	if !(f > 0) {
		return
	}
	f = math.Min(f, 1)
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	s := &c.l.buckets
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
func (c ClusterShare) BurstFill(now time.Time) (level, seconds float64) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	s := &c.l.buckets
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
func (c ClusterShare) BurstDepth() [NumDims]float64 {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	var d [NumDims]float64
	for i := range c.l.buckets.b {
		if b := &c.l.buckets.b[i]; b.capacity > 0 {
			d[i] = c.l.buckets.burstDepth(b)
		}
	}
	return d
}

// Share returns the share SetShare last applied (1 by default).
func (c ClusterShare) Share() float64 {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.buckets.share
}

// Debited returns the running sum of every debit since the Limiter was
// made (see Limiter.Mark): a cluster node's recent use is the difference between
// two readings.
func (c ClusterShare) Debited() Amount {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.est.debited
}
