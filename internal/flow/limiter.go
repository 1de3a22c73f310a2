package flow

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrTooLarge means a cost exceeds a bucket's capacity: it can never fit.
var ErrTooLarge = errors.New("cost exceeds the bucket's capacity")

// LimiterConfig configures a Limiter.
type LimiterConfig struct {
	// Limits are the per-minute limits for each dimension; 0 means unknown
	// (learned from the provider's headers, unlimited until then). Defaults
	// to all unknown.
	Limits [NumDims]float64
	// BurstSeconds is the initial bucket depth in seconds of refill, in
	// (0, 60]. Required.
	BurstSeconds float64
	// SafetyMargin is the share of each limit used, in (0, 1]. Required.
	SafetyMargin float64
	// JitterAllowance keeps each bucket's depth this much refill below the
	// burst it is derived from (BurstSeconds, or the provider's remaining
	// when deepening): requests admitted in order but delayed unevenly on
	// their way (a busy CPU, a slow connection) can then bunch up at the
	// provider without outrunning its bucket. The depth never drops below
	// half of what it would be without it. Zero or
	// negative means none.
	JitterAllowance time.Duration
	// MaxSafetyMargin, when above SafetyMargin, makes the margin adaptive:
	// the Limiter uses MaxSafetyMargin of each limit while no 429 is seen,
	// drops to SafetyMargin at a 429 (Pause) and narrows back linearly
	// over MarginRecovery. Zero (or at most SafetyMargin) keeps the
	// margin fixed at SafetyMargin.
	MaxSafetyMargin float64
	// MarginRecovery is how long the margin takes to narrow from
	// SafetyMargin back to MaxSafetyMargin after a 429. Defaults to
	// MarginRecoveryDefault.
	MarginRecovery time.Duration
}

// MarginRecoveryDefault is how long an adaptive margin takes to narrow
// back after a 429.
const MarginRecoveryDefault = time.Minute

func (c LimiterConfig) validate() error {
	for i, l := range c.Limits {
		if l < 0 || math.IsNaN(l) || math.IsInf(l, 0) {
			return fmt.Errorf("Limits[%s] must be a finite number >= 0, got %v", Dim(i), l)
		}
	}
	if !(c.BurstSeconds > 0 && c.BurstSeconds <= 60) {
		return fmt.Errorf("BurstSeconds must be in (0, 60], got %v", c.BurstSeconds)
	}
	if !(c.SafetyMargin > 0 && c.SafetyMargin <= 1) {
		return fmt.Errorf("SafetyMargin must be in (0, 1], got %v", c.SafetyMargin)
	}
	if c.JitterAllowance > time.Minute {
		return fmt.Errorf("JitterAllowance must be at most 1m, got %v", c.JitterAllowance)
	}
	if c.MaxSafetyMargin != 0 && !(c.MaxSafetyMargin >= c.SafetyMargin && c.MaxSafetyMargin <= 1) {
		return fmt.Errorf("MaxSafetyMargin must be 0 or in [SafetyMargin, 1], got %v", c.MaxSafetyMargin)
	}
	if c.MarginRecovery < 0 {
		return fmt.Errorf("MarginRecovery must be >= 0, got %v", c.MarginRecovery)
	}
	return nil
}

// A Limiter mirrors a provider's token buckets, one per quota dimension
// (requests, input, output and combined tokens per minute), so that a
// request is sent only when every dimension has room for its estimated
// cost. Its invariant: it never assumes more room than the provider has.
//
// A bucket's capacity is its per-minute limit times the safety margin in
// force; it refills continuously at capacity/60 per second up to its depth
// (BurstSeconds of refill to start with), and a request larger than the
// depth, but within the capacity, may accumulate room up to its own cost.
// Reserve debits a request's estimated cost before it is sent, or says how
// long until it fits; Reconcile corrects the debit with the usage the
// provider reports and Refund returns what a failed attempt did not
// consume (a level may go negative, which delays later requests); Pause
// stops every admission until an instant; SlowDown cuts the refill rate
// for a while.
//
// Observe compares the buckets with the provider's rate-limit report of a
// request (observe.go): it brings the report forward to now, clamps every
// level to it, learns the limits not configured and deepens or raises a
// bucket the provider shows to hold more. In a cluster the Limiter uses
// its node's share of every bucket and exchanges bursts and reports with
// the other nodes through its ClusterShare (Cluster; limiter_share.go,
// limiter_cluster.go). docs/engine.md
// ("Token buckets") derives each rule.
//
// Every method takes the current instant as now and none reads a clock.
// The zero Limiter is not ready for use: make one with NewLimiter. A
// Limiter is safe for concurrent use.
type Limiter struct {
	// One mutex over every part: a debit and its record in the account,
	// or a report and the levels it sets, change together.
	mu sync.Mutex
	// buckets is the bucket arithmetic (bucket.go, margin.go, room.go).
	buckets bucketSet
	// est is the account Observe compares the provider's reports with
	// (observe.go).
	est estimator
	// cluster is what a cluster shares of the reports (limiter_cluster.go).
	cluster clusterReports
}

// NewLimiter returns a Limiter with full buckets at now.
func NewLimiter(cfg LimiterConfig, now time.Time) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Limiter{
		buckets: newBucketSet(cfg, now),
		est:     estimator{allowance: max(cfg.JitterAllowance, 0)},
	}, nil
}

// TimeUntil returns how long until cost fits in every bucket and the
// upstream is not paused; 0 means it fits now. A cost larger than a
// bucket's capacity returns ErrTooLarge at once.
func (l *Limiter) TimeUntil(cost Amount, now time.Time) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	return l.buckets.timeUntil(cost, Keep{}, now)
}

// Reserve debits cost when it fits now and returns 0. When it does not fit
// it debits nothing and returns how long until it will; ErrTooLarge when it
// never will.
func (l *Limiter) Reserve(cost Amount, now time.Time) (time.Duration, error) {
	return l.ReserveKeeping(cost, Keep{}, now)
}

// ReserveKeeping is Reserve for a request that must leave keep unused:
// the room that lets a more urgent class be admitted at once while the
// upstream is saturated. The refill rate, and so the throughput, is the
// same; only the level the buckets idle at under saturation is higher. A
// request too large to leave the room only needs the bucket full.
func (l *Limiter) ReserveKeeping(cost Amount, keep Keep, now time.Time) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	w, err := l.buckets.timeUntil(cost, keep, now)
	if err != nil || w > 0 {
		return w, err
	}
	l.buckets.take(cost, now)
	l.est.debit(cost, now)
	return 0, nil
}

// Reconcile corrects a reservation with what the request actually
// consumed: the difference is refunded or debited (the level may go
// negative, which delays later requests).
//
// Call it only for a request the provider charged and answered with its
// usage: the output it did not use is counted as given back by the
// provider, which Observe credits to the reports made before (see
// Observe).
func (l *Limiter) Reconcile(reserved, actual Amount, now time.Time) {
	l.ReconcilePending(reserved, actual, now, now)
}

// ReconcilePending is Reconcile when requests reserved since unsent may
// not have been sent yet (see RefundPending).
func (l *Limiter) ReconcilePending(reserved, actual Amount, unsent, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if back := reserved[OutputTokens] - actual[OutputTokens]; back > 0 {
		l.est.giveBack(back, now)
	}
	l.refund(reserved.Sub(actual), unsent, now)
}

// Refund returns amount to the buckets (e.g. what a failed attempt did not
// consume). A negative amount debits.
//
// A credit raises a level at most to the bucket's depth less what was
// debited within the last jitter allowance: those requests may not have
// reached the provider yet, and while they have not, its bucket may be
// full and keep nothing of what it gives back, when ours, debited
// already, would keep it (docs/engine.md, "Why the credit cap matters").
func (l *Limiter) Refund(amount Amount, now time.Time) {
	l.RefundPending(amount, now, now)
}

// RefundPending is Refund when requests reserved since unsent may not
// have been sent yet (a ticket reserved at Acquire and not called): what
// was debited since the earlier of unsent and one jitter allowance ago
// is held out of the credit's cap. A credit when the debit history does
// not reach back that far is dropped above the current level.
func (l *Limiter) RefundPending(amount Amount, unsent, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refund(amount, unsent, now)
}

// refund is RefundPending with l.mu held.
func (l *Limiter) refund(amount Amount, unsent, now time.Time) {
	l.buckets.refresh(now)
	var debit Amount
	debits, credits := false, false
	for i, a := range amount {
		if a < 0 {
			debit[i] = -a
			debits = true
		}
		credits = credits || a > 0 && l.buckets.b[i].capacity > 0
	}
	if debits {
		l.est.debit(debit, now)
	}
	var pending Amount
	held := true
	if credits {
		pending, held = l.est.unsent(unsent, now)
	}
	l.buckets.put(amount, pending, held, now)
}

// Withdraw gives back amount of a reservation debited at debitedAt whose
// request was not sent yet (a ticket whose real request costs less than
// it reserved): credited as RefundPending credits (unsent as there), and
// taken out of the debit account Observe compares the provider's reports
// with, since the provider will never charge it. Only the positive parts
// of amount are withdrawn.
func (l *Limiter) Withdraw(amount Amount, debitedAt, unsent, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var back Amount
	for i, a := range amount {
		back[i] = max(a, 0)
	}
	if back != (Amount{}) {
		l.est.withdraw(back, debitedAt)
	}
	l.refund(back, unsent, now)
}

// Unreserve takes back a reservation made at the same instant that could
// not go ahead (another bucket refused it): the level is restored exactly,
// unlike a Refund's credit, and the debit stays counted (the safe side for
// Observe).
func (l *Limiter) Unreserve(cost Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	l.buckets.restore(cost, now)
}

// SlowDownFloor is the smallest share of its limit a bucket slowed down
// refills at, however many cuts compound.
const SlowDownFloor = 0.05

// SlowDown cuts every bucket's refill rate to factor times its current rate
// and ramps it back linearly to the full limit over ramp. It answers a
// provider that asks to slow down without a wait hint (OpenAI's 503 "Slow
// Down": reduce to the original rate, keep it steady, ramp up slowly).
// Cuts compound, down to SlowDownFloor of the limit.
func (l *Limiter) SlowDown(factor float64, ramp time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.slowDown(factor, ramp, now)
}

// Scale returns the current refill-rate multiplier (1 when not slowed down).
func (l *Limiter) Scale(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buckets.slow.scaleAt(now)
}

// Pause stops every admission until until (a RATE 429 pauses the whole
// upstream), widens the safety margin and makes the buckets shallow
// again. An earlier instant than the current pause is ignored.
func (l *Limiter) Pause(until, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.pause(until, now)
}

// PausedUntil returns the end of the current pause (zero when never paused).
func (l *Limiter) PausedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buckets.pausedUntil
}

// WaitFor predicts how long until demand (which may exceed the capacity,
// e.g. the whole queue ahead plus one request) has been refilled, ignoring
// the depth. It is the basis for shedding requests that cannot make their
// deadline. On a cluster node it counts on the whole bucket's rate, not
// the node's share: the share follows the node's demand.
func (l *Limiter) WaitFor(demand Amount, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	return l.buckets.waitFor(demand, now)
}

// BucketState is one bucket's state for operators and metrics.
type BucketState struct {
	// Capacity is the per-minute limit after the safety margin (0 unknown).
	Capacity float64
	// Depth is how much the bucket may hold for small requests.
	Depth float64
	// Level is the room available now (may be negative).
	Level float64
	// Reported is the provider's last report of this dimension (its limit
	// and remaining; Remaining < 0 when it reported none) and ReportedAt
	// when it came (zero: never reported).
	Reported   Observation
	ReportedAt time.Time
}

// State returns every bucket's state at now.
func (l *Limiter) State(now time.Time) [NumDims]BucketState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	var s [NumDims]BucketState
	for i := range l.buckets.b {
		b := &l.buckets.b[i]
		s[i] = BucketState{Capacity: b.cp(), Depth: b.dep(), Reported: l.est.reported[i], ReportedAt: l.est.reportedAt[i]}
		if l.est.reportedAt[i].IsZero() {
			s[i].Reported.Remaining = -1
		}
		if b.capacity > 0 {
			s[i].Level = b.at(now, b.dep())
		}
	}
	return s
}
