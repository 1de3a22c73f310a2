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

// Heard returns, per dimension, the latest report this Limiter's own
// Observe (or Clamp) received: what a cluster node publishes. Reports
// taken from the cluster (Adopt) are not included.
func (l *Limiter) Heard() [NumDims]Heard {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heard
}

// Adopt applies a report of dimension d that another node (or this one,
// through the cluster) received, as the cluster's latest; now is this
// node's clock.
//
// A limit newer than both the latest this Limiter observed itself and
// the latest it adopted is learned as Observe learns one (at most a
// configured limit, times the safety margin, then times the node's
// share): a node that never had an answer, or whose upstream has no
// limits configured, uses the cluster's learned limit at once.
//
// A remaining newer than the latest adopted can only lower the level, to
//
//	share·R + rate·(now − SentAt) − (debited now − debited at SentAt)
//
// where rate is this node's refill rate (its share of the capacity). The
// provider held R when it charged the reported request, which it does on
// arrival, at SentAt (taken as the charge); it refills at most at the
// whole bucket's rate since, and every request any node admitted since
// was charged against it. Each node holds at most its share of R plus its
// share of the refill, less what it admitted itself; the shares the
// cluster grants sum to at most 1, so the levels of all nodes together
// never exceed R + refill − everything the cluster admitted since: the
// room the provider has. Two slacks, both Observe's: requests admitted
// before SentAt that reach the provider after it are not in R and not
// taken off (they are in flight, already debited here), and a charge
// later than SentAt (within the jitter allowance) credits its delay's
// refill early, at most rate × allowance across the cluster; this node's
// admissions in that delay offset it. Taking the charge at SentAt keeps a
// saturated node at its level (its admissions since equal its refill), so
// a report costs no throughput. Nodes' clocks are compared (SentAt is the
// reporting node's): a skew of d moves the bound by at most rate × d. A
// report older than the debit history reaches back to is not applied.
// The rule never raises a level: the local view and Observe's own clamp
// still hold, and with them the shares' bound of rate·t + depth.
func (l *Limiter) Adopt(d Dim, h Heard, now time.Time) {
	if d < 0 || d >= NumDims {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	b := &l.b[d]
	if h.HasLimit() && h.LimitAt.After(l.heard[d].LimitAt) && h.LimitAt.After(l.adopted[d].LimitAt) {
		l.adopted[d].Limit, l.adopted[d].LimitAt = h.Limit, h.LimitAt
		want := h.Limit
		if configured := l.cfg.Limits[d]; configured > 0 {
			want = math.Min(want, configured)
		}
		if want != b.limit {
			l.setLimit(d, want, now)
		}
	}
	if !h.HasRemaining() || !h.At.After(l.adopted[d].At) {
		return
	}
	l.adopted[d].Remaining, l.adopted[d].Reset, l.adopted[d].SentAt, l.adopted[d].At = h.Remaining, h.Reset, h.SentAt, h.At
	if b.capacity == 0 {
		return
	}
	from := h.SentAt
	if from.IsZero() || from.After(h.At) {
		from = h.At
	}
	before, ok := l.hist.before(from)
	if !ok {
		return
	}
	b.settle(now)
	bound := h.Remaining*b.part() + b.rate()*math.Max(now.Sub(from).Seconds(), 0) - (l.debited[d] - before[d])
	b.level = math.Min(b.level, bound)
}
