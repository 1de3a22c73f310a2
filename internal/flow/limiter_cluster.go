package flow

import (
	"math"
	"time"
)

// Heard is the provider's latest report of one dimension as a cluster of
// nodes shares it (internal/cluster): the limit and when it was learned,
// and the remaining with when the request it answered was sent and when
// the answer came. The zero Heard reports nothing.
type Heard struct {
	// Limit is the provider's per-minute limit, learned at LimitAt (zero:
	// no limit reported).
	Limit   float64
	LimitAt time.Time
	// Remaining is the level the provider reported in the answer that
	// came at At (zero At: no remaining reported) to a request sent at
	// SentAt (zero: unknown); Reset is when the provider said its bucket
	// would be full again (zero: not said).
	Remaining float64
	Reset     time.Time
	SentAt    time.Time
	At        time.Time
}

// HasLimit reports whether h carries a limit.
func (h Heard) HasLimit() bool { return h.Limit > 0 && !h.LimitAt.IsZero() }

// HasRemaining reports whether h carries a remaining.
func (h Heard) HasRemaining() bool { return h.Remaining >= 0 && !h.At.IsZero() }

// note records an Observation answered at now to a request sent at sent.
func (h *Heard) note(o Observation, sent, now time.Time) {
	if o.Limit > 0 {
		h.Limit, h.LimitAt = o.Limit, now
	}
	if o.Remaining >= 0 {
		h.Remaining, h.Reset, h.SentAt, h.At = o.Remaining, o.Reset, sent, now
	}
}

// clusterReports is what a Limiter exchanges of the provider's reports
// with a cluster: what its own Observe heard (for the node to publish),
// and the latest it adopted from the cluster (Adopt).
type clusterReports struct {
	heard   [NumDims]Heard
	adopted [NumDims]Heard
}

// Heard returns, per dimension, the latest report the Limiter's own
// Observe (or Clamp) received: what a cluster node publishes. Reports
// taken from the cluster (Adopt) are not included.
func (c ClusterShare) Heard() [NumDims]Heard {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.cluster.heard
}

// Adopt applies a report of dimension d that another node (or this one,
// through the cluster) received, as the cluster's latest; now is this
// node's clock.
//
// A limit newer than both the latest this Limiter observed itself and
// the latest it adopted is learned as Observe learns one (at most a
// configured limit, times the safety margin, then times the node's
// share).
//
// A remaining R newer than the latest adopted can only lower the level,
// to
//
//	share·R + rate·(now − SentAt) − (debited now − debited at SentAt)
//
// where rate is this node's refill rate: each node keeps at most its
// share of R and of the refill since, less what it admitted itself, so
// the nodes together never count on more room than the provider has
// (docs/cluster.md, "Shared provider reports", derives it and its
// slack). A report older than the debit history reaches back to is not
// applied.
func (c ClusterShare) Adopt(d Dim, h Heard, now time.Time) {
	if d < 0 || d >= NumDims {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	c.l.buckets.refresh(now)
	b := &c.l.buckets.b[d]
	heard, adopted := &c.l.cluster.heard[d], &c.l.cluster.adopted[d]
	if h.HasLimit() && h.LimitAt.After(heard.LimitAt) && h.LimitAt.After(adopted.LimitAt) {
		adopted.Limit, adopted.LimitAt = h.Limit, h.LimitAt
		c.l.buckets.learn(d, h.Limit, now)
	}
	if !h.HasRemaining() || !h.At.After(adopted.At) {
		return
	}
	adopted.Remaining, adopted.Reset, adopted.SentAt, adopted.At = h.Remaining, h.Reset, h.SentAt, h.At
	if b.capacity == 0 {
		return
	}
	from := h.SentAt
	if from.IsZero() || from.After(h.At) {
		from = h.At
	}
	taken, ok := c.l.est.debitedSince(from)
	if !ok {
		return
	}
	b.settle(now)
	bound := h.Remaining*b.part() + b.rate()*math.Max(now.Sub(from).Seconds(), 0) - taken[d]
	b.level = math.Min(b.level, bound)
}
