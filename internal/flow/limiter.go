package flow

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Dim is one quota dimension the Limiter mirrors.
type Dim int

// The quota dimensions, as the providers count them.
const (
	// Requests is requests per minute (RPM).
	Requests Dim = iota
	// InputTokens is input tokens per minute (Anthropic ITPM).
	InputTokens
	// OutputTokens is output tokens per minute (Anthropic OTPM).
	OutputTokens
	// Tokens is combined input+output tokens per minute (OpenAI TPM,
	// Anthropic tokens-*).
	Tokens
)

// NumDims is how many dimensions there are.
const NumDims = 4

var dimNames = [NumDims]string{"requests", "input_tokens", "output_tokens", "tokens"}

func (d Dim) String() string {
	if d < 0 || d >= NumDims {
		return fmt.Sprintf("dim(%d)", int(d))
	}
	return dimNames[d]
}

// Amount is a quantity in every dimension, e.g. the cost of one request.
type Amount [NumDims]float64

// NewAmount returns the cost of one request with the given token counts:
// one request, in input tokens, out output tokens and in+out combined.
func NewAmount(in, out int64) Amount {
	return Amount{1, float64(in), float64(out), float64(in + out)}
}

// Add returns a+b.
func (a Amount) Add(b Amount) Amount {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// Sub returns a-b.
func (a Amount) Sub(b Amount) Amount {
	for i := range a {
		a[i] -= b[i]
	}
	return a
}

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

// bucket is one token bucket. Capacity is the per-minute limit (after the
// safety margin); depth is how much it may hold for small requests. The
// level is stored as of `last` and read lazily: level(now, cap) =
// min(cap, level + rate·(now−last)), where cap is max(depth, cost) for a
// request of that cost, so a request larger than the depth (but within the
// capacity) can still accumulate enough room to be sent.
type bucket struct {
	limit    float64 // the per-minute limit capacity derives from; 0 = unknown
	capacity float64 // 0 = unlimited
	depth    float64
	level    float64
	last     time.Time
	scale    float64 // refill-rate multiplier from Throttle; 0 means 1
	share    float64 // this node's share of the capacity (SetShare); 0 means 1
}

// part is the node's share of the bucket: 1 unless SetShare said less.
func (b *bucket) part() float64 {
	if b.share > 0 {
		return b.share
	}
	return 1
}

// dep and cp are the depth and capacity this node may use: its share of
// the bucket's.
func (b *bucket) dep() float64 { return b.depth * b.part() }
func (b *bucket) cp() float64  { return b.capacity * b.part() }

func (b *bucket) rate() float64 {
	if b.scale > 0 {
		return b.capacity / 60 * b.scale * b.part()
	}
	return b.capacity / 60 * b.part()
}

// at returns the level at now for a request capped at c.
func (b *bucket) at(now time.Time, c float64) float64 {
	dt := now.Sub(b.last).Seconds()
	if dt < 0 {
		dt = 0
	}
	return math.Min(c, b.level+b.rate()*dt)
}

// settle moves the stored level to now, keeping everything up to capacity.
func (b *bucket) settle(now time.Time) {
	if now.After(b.last) {
		b.level = b.at(now, math.Max(b.cp(), b.level))
		b.last = now
	}
}

// wait returns how long until cost fits while leaving hold (tokens) in
// the bucket; 0 when it fits now. A request too big to leave the headroom
// only needs the bucket full.
func (b *bucket) wait(cost, hold float64, now time.Time) time.Duration {
	if b.capacity == 0 || cost <= 0 {
		return 0
	}
	c := math.Max(b.dep(), cost)
	need := math.Min(cost+hold, c)
	lvl := b.at(now, c)
	if lvl >= need {
		return 0
	}
	return secs((need - lvl) / b.rate())
}

func secs(s float64) time.Duration {
	d := time.Duration(math.Ceil(s * float64(time.Second)))
	if d <= 0 {
		return time.Nanosecond
	}
	return d
}

// Limiter mirrors the provider's token buckets, one per dimension, so that a
// request is sent only when every dimension has room for its estimated cost.
// Reserve debits the estimate before sending; Reconcile corrects it with the
// actual usage (the level may go negative); Refund returns what a failed
// attempt did not consume; Observe clamps every level to what the provider
// reports as remaining, brought forward from when the provider made the
// report (never assuming more room than it has), learns
// limits that were not configured and deepens a bucket when the provider
// shows more room; Pause stops the whole upstream until an instant.
//
// All methods take the current time. A Limiter is safe for concurrent use.
type Limiter struct {
	mu          sync.Mutex
	cfg         LimiterConfig
	b           [NumDims]bucket
	pausedUntil time.Time
	throttle    throttle
	// debited is the running sum, per dimension, of every debit (Reserve,
	// and a Refund or Reconcile that takes more) since the Limiter was
	// made, in every dimension whether limited or not: the difference
	// between two Marks is what was taken from the buckets in between.
	// Credits are not counted (see Observe).
	debited Amount
	// share is this node's share of every bucket (SetShare), in (0, 1].
	share float64
	// margin is the safety margin in force (see marginAt); widened is
	// the last 429 (Pause), zero when none was seen.
	margin  float64
	widened time.Time
	// hist is the recent history of debited, for Observe and the credit
	// cap (RefundPending).
	hist debitHistory
	// credited is the running sum of the output tokens answered requests
	// did not use (Reconcile), in the OutputTokens and Tokens dimensions:
	// what the provider gave back when each answered. credHist is its
	// recent history, for Observe's lowering.
	credited Amount
	credHist debitHistory
	// reported is the provider's last report per dimension (Observe),
	// reportedAt when it came: the provider's view beside ours.
	reported   [NumDims]Observation
	reportedAt [NumDims]time.Time
	// heard is what this Limiter's own Observe learned, for a cluster to
	// share, and adopted what it took from the cluster (Adopt).
	heard   [NumDims]Heard
	adopted [NumDims]Heard
}

// Mark is the Limiter's account at one instant, taken when a request is
// sent (Limiter.Mark) and given back to Observe with that request's
// rate-limit headers, so the provider's report can be compared with the
// buckets as they were when it was made. The zero Mark means unknown.
type Mark struct {
	at      time.Time
	debited Amount
	from    time.Time // see From
}

// From returns m noting that requests reserved since t (t included) may
// not have reached the provider before the request m was taken for (they
// were not answered yet when it was sent): Observe's raise subtracts
// everything debited since t, or since the mark less the jitter allowance
// if that is earlier. The zero t adds nothing.
func (m Mark) From(t time.Time) Mark {
	m.from = t
	return m
}

// Mark returns the account at now.
func (l *Limiter) Mark(now time.Time) Mark {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Mark{at: now, debited: l.debited}
}

// throttle is a refill-rate cut that ramps linearly back to the full rate.
type throttle struct {
	factor float64 // the multiplier at since
	since  time.Time
	ramp   time.Duration // 0: no throttle
}

// scaleAt is the refill-rate multiplier at now.
func (t throttle) scaleAt(now time.Time) float64 {
	if t.ramp <= 0 {
		return 1
	}
	el := now.Sub(t.since)
	if el >= t.ramp {
		return 1
	}
	if el < 0 {
		el = 0
	}
	return t.factor + (1-t.factor)*float64(el)/float64(t.ramp)
}

// ThrottleFloor is the smallest share of its limit a throttled bucket
// refills at, however many cuts compound.
const ThrottleFloor = 0.05

// Throttle cuts every bucket's refill rate to factor times its current rate
// and ramps it back linearly to the full limit over ramp. It answers a
// provider that asks to slow down without a wait hint (OpenAI's 503 "Slow
// Down": reduce to the original rate, keep it steady, ramp up slowly).
// Cuts compound, down to ThrottleFloor of the limit.
func (l *Limiter) Throttle(factor float64, ramp time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	if !(factor > 0 && factor < 1) || ramp <= 0 {
		return
	}
	l.throttle = throttle{factor: math.Max(l.throttle.scaleAt(now)*factor, ThrottleFloor), since: now, ramp: ramp}
	l.refresh(now)
}

// Scale returns the current refill-rate multiplier (1 when not throttled).
func (l *Limiter) Scale(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.throttle.scaleAt(now)
}

// refresh settles every bucket at the rate it had, then applies the
// throttle's multiplier at now; l.mu held.
func (l *Limiter) refresh(now time.Time) {
	if m := l.marginAt(now); m != l.margin {
		l.setMargin(m, now)
	}
	s := l.throttle.scaleAt(now)
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 || b.scale == s || (b.scale == 0 && s == 1) {
			continue
		}
		b.settle(now)
		b.scale = s
	}
	if s == 1 {
		l.throttle = throttle{}
	}
}

// NewLimiter returns a Limiter with full buckets at now.
func NewLimiter(cfg LimiterConfig, now time.Time) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, share: 1}
	l.margin = l.marginAt(now)
	for i, lim := range cfg.Limits {
		if lim > 0 {
			l.setLimit(Dim(i), lim, now)
		}
	}
	return l, nil
}

// withMargin applies the safety margin, never leaving less than one unit
// of a limit of at least one (1 RPM stays usable).
func (l *Limiter) withMargin(limit float64) float64 {
	return math.Max(limit*l.margin, math.Min(limit, 1))
}

func (l *Limiter) initialDepth(capacity float64) float64 {
	return l.lessJitter(capacity, math.Min(capacity, capacity/60*l.cfg.BurstSeconds))
}

// headroomDepth is the depth a headroom share applies to: the configured
// burst (BurstSeconds), not a depth learned from the provider. The
// headroom is there for an urgent request to be admitted at once; a
// deeper provider bucket does not need more of it left unused, and what
// is left unused is refill lost when the queue runs dry.
func (l *Limiter) headroomDepth(b *bucket) float64 {
	return math.Min(b.dep(), l.initialDepth(b.capacity)*b.part())
}

// lessJitter takes the jitter allowance (at capacity's refill rate) off a
// depth, keeping at least half of it.
func (l *Limiter) lessJitter(capacity, depth float64) float64 {
	if l.cfg.JitterAllowance <= 0 {
		return depth
	}
	return math.Max(depth/2, depth-capacity/60*l.cfg.JitterAllowance.Seconds())
}

// setLimit (re)sizes a bucket for a per-minute limit: its capacity is
// the limit times the margin in force; l.mu held or not yet shared.
func (l *Limiter) setLimit(d Dim, limit float64, now time.Time) {
	l.b[d].limit = limit
	l.setCapacity(d, l.withMargin(limit), now)
}

// setCapacity (re)sizes a bucket; l.mu held or not yet shared.
func (l *Limiter) setCapacity(d Dim, capacity float64, now time.Time) {
	b := &l.b[d]
	b.settle(now)
	b.share = l.share
	if b.capacity == 0 {
		// A new bucket starts full, like the provider's; reads are capped
		// at the depth, so only a big request can use more than that.
		b.depth = l.initialDepth(capacity)
		b.level = capacity
	} else {
		b.depth = math.Min(capacity, math.Max(b.depth, l.initialDepth(capacity)))
	}
	b.capacity = capacity
	b.level = math.Min(b.level, b.cp())
	b.last = now
}

// TimeUntil returns how long until cost fits in every bucket and the
// upstream is not paused; 0 means it fits now. A cost larger than a
// bucket's capacity returns ErrTooLarge at once.
func (l *Limiter) TimeUntil(cost Amount, now time.Time) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	return l.timeUntil(cost, Keep{}, now)
}

func (l *Limiter) timeUntil(cost Amount, keep Keep, now time.Time) (time.Duration, error) {
	var w time.Duration
	for i := range l.b {
		b := &l.b[i]
		if b.capacity > 0 && cost[i] > b.capacity {
			return 0, fmt.Errorf("%w: %s cost %.0f > capacity %.0f", ErrTooLarge, Dim(i), cost[i], b.capacity)
		}
		w = max(w, b.wait(cost[i], l.hold(Dim(i), keep), now))
	}
	if p := l.pausedUntil.Sub(now); p > w {
		w = p
	}
	return w, nil
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
	l.refresh(now)
	w, err := l.timeUntil(cost, keep, now)
	if err != nil || w > 0 {
		return w, err
	}
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		b.level = math.Min(b.level, math.Max(b.dep(), cost[i])) - cost[i]
	}
	l.debited = l.debited.Add(cost)
	l.hist.record(now, l.debited)
	return 0, nil
}

// Reconcile corrects a reservation with what the request actually
// consumed: the difference is refunded or debited (the level may go
// negative, which delays later requests).
//
// Call it only for a request the provider charged and answered with its
// usage: a provider that charges max_tokens as output gives the unused
// output back when it answers, and Observe credits what it gave back
// after a report to that report (see Observe).
func (l *Limiter) Reconcile(reserved, actual Amount, now time.Time) {
	l.ReconcilePending(reserved, actual, now, now)
}

// ReconcilePending is Reconcile when requests reserved since unsent may
// not have been sent yet (see RefundPending).
func (l *Limiter) ReconcilePending(reserved, actual Amount, unsent, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if back := reserved[OutputTokens] - actual[OutputTokens]; back > 0 {
		l.credited[OutputTokens] += back
		l.credited[Tokens] += back
		l.credHist.record(now, l.credited)
	}
	l.refund(reserved.Sub(actual), unsent, now)
}

// Refund returns amount to the buckets (e.g. what a failed attempt did not
// consume). A negative amount debits.
//
// A credit raises a level at most to the bucket's depth less what was
// debited within the last jitter allowance: those requests may not have
// reached the provider yet, and while they have not, its bucket may be
// full and drop what it gives back (a token bucket never holds more than
// its depth), when ours, debited already, would keep it. Without that cap
// a refund landing while the provider was full let the engine run a
// request ahead of the provider (seed 11 of the dispatcher's quota
// property test: a 429, 300 output tokens short). The one-allowance
// shortfall of refill is already taken off the depth (lessJitter).
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
	l.refresh(now)
	debits, credits := false, false
	for i, a := range amount {
		if a < 0 {
			l.debited[i] -= a
			debits = true
		}
		credits = credits || a > 0 && l.b[i].capacity > 0
	}
	if debits {
		l.hist.record(now, l.debited)
	}
	var pending Amount
	held := true
	if credits {
		from := now.Add(-max(l.cfg.JitterAllowance, 0))
		if unsent.Before(from) {
			from = unsent.Add(-time.Nanosecond)
		}
		var before Amount
		if before, held = l.hist.before(from); held {
			pending = l.debited.Sub(before)
		}
	}
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		if amount[i] <= 0 {
			b.level += amount[i]
			continue
		}
		top := b.level // nothing above it when the history is too short
		if held {
			top = math.Max(b.level, b.dep()-pending[i])
		}
		b.level = math.Min(b.level+amount[i], top)
	}
}

// Unreserve takes back a reservation made at the same instant that could
// not go ahead (another bucket refused it): the level is restored exactly,
// unlike a Refund's credit, and the debit stays counted (the safe side for
// Observe).
func (l *Limiter) Unreserve(cost Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		b.level += cost[i]
	}
}

// Observation is the provider's report of one dimension.
type Observation struct {
	// Limit is the provider's per-minute limit; <= 0 when not reported.
	Limit float64
	// Remaining is the level the provider reports; < 0 when not reported.
	Remaining float64
	// Precision is how much Remaining may exceed the provider's level
	// (Anthropic rounds token remaining to the nearest thousand: 500).
	// Lowering the view uses Remaining as it is; raising it (the depth
	// and the level) uses Remaining − Precision.
	Precision float64
	// Reset is when the provider says its bucket is full again; zero
	// when not reported. Informational (shared with a cluster, shown).
	Reset time.Time
}

// Observe applies the provider's rate-limit snapshot, reported in the
// answer to a request sent at since (the Mark taken when it was sent; the
// zero Mark if unknown). A limit not configured is learned (times the
// safety margin).
//
// The provider's remaining R describes its bucket when it charged that
// request; the buckets have moved since: they refilled for now−since, and
// every request admitted after since took from them, while R knows
// nothing of those. So R is brought to now like for like before it is
// compared:
//
//	R' = R + rate·(now − since − allowance) − (debited now − debited at since + allowance)
//	       + (output given back by Reconcile after since + 2·allowance)
//
// Each level is clamped to R' (Sluice never assumes more room than the
// provider has). The provider's report also raises the view: R proves the
// provider's bucket at least R deep, so a shallower bucket deepens to R
// (less the jitter allowance, up to the capacity), and a level below what
// the provider holds is raised to
//
//	R'' = min(R − precision, depth) − (debited now − debited before the lookback)
//
// where the lookback is the earlier of the mark less the jitter allowance
// and the instant Mark.From names (when the oldest attempt that may reach
// the provider after this one was reserved): every request that R may not
// count is taken off, and neither refill nor refunds since are credited.
// Capping at the depth follows the provider's bucket (it stops refilling
// when full); a raise is never needed for safety, only to win back what a
// conservative clamp or a cautious start left unused, so it errs on the
// safe side everywhere. A fresh upstream thus starts at the provider's
// real level after its first answer, not at a guessed depth.
// Without a Mark, R' = R and nothing is raised. The provider charged the
// request some time after we sent it, at most the jitter allowance if the
// delivery stayed within it, so the refill is credited from the mark plus
// the allowance: never more than the provider refilled. What was
// reserved within the allowance after the mark may or may not be in R:
// it is not taken off (our buckets hold it already; taking it off again
// lowered the level by every request sent just after the reported one),
// so R' can be above the provider's level by at most that much, and the
// clamp corrects for what our buckets do not know (another client on the
// key, a provider's different count) to within it. With no allowance,
// everything since the mark is taken off. A provider that charges max_tokens
// as output gives the unused part back when the request answers; R counts
// those given back before it was made but not those after, which is most
// of them when answers take seconds, so the output Reconcile gave back is
// credited too, but only from two allowances after the mark: the charge
// came at most one allowance after the mark, and an answer reaches us at
// most one allowance after the provider gave its output back, so a credit
// made later was given back after R. Without it every report lowers the
// view by the output held by requests that have since answered, and an
// output-bound upstream idles (0.46 of the ideal, seed 26 of
// TestDispatcherNeverExceedsProviderQuota). This is safe only because a
// credit never fills a bucket over what may not have reached the
// provider yet (RefundPending). Credits other than
// Reconcile's (a failed attempt's refund) are never added: the provider
// may never have charged them.
func (l *Limiter) Observe(obs map[Dim]Observation, since Mark, now time.Time) {
	l.observe(obs, since, now, true)
}

// Clamp is Observe for a report that may describe another bucket than
// this Limiter's (an org's account-level Limiter fed a key's headers):
// limits are learned and levels lowered to R', but nothing is deepened
// or raised.
func (l *Limiter) Clamp(obs map[Dim]Observation, since Mark, now time.Time) {
	l.observe(obs, since, now, false)
}

func (l *Limiter) observe(obs map[Dim]Observation, since Mark, now time.Time, raise bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	allowance := max(l.cfg.JitterAllowance, 0)
	for d, o := range obs {
		if d < 0 || d >= NumDims {
			continue
		}
		b := &l.b[d]
		if o.Limit > 0 || o.Remaining >= 0 {
			l.reported[d], l.reportedAt[d] = o, now
			l.heard[d].note(o, since.at, now)
		}
		if o.Limit > 0 {
			want := o.Limit
			if configured := l.cfg.Limits[d]; configured > 0 {
				want = math.Min(want, configured)
			}
			if want != b.limit {
				l.setLimit(d, want, now)
			}
		}
		if b.capacity == 0 || o.Remaining < 0 {
			continue
		}
		b.settle(now)
		// R proves the provider's bucket at least that deep.
		sure := math.Max(o.Remaining-max(o.Precision, 0), 0) // what the provider surely holds
		if room := l.lessJitter(b.capacity, sure); raise && room > b.depth {
			b.depth = math.Min(b.capacity, room)
		}
		remaining := o.Remaining
		if since.at.IsZero() {
			b.level = math.Min(b.level, remaining)
			continue
		}
		// The provider charged the request up to a jitter allowance
		// after we sent it: credit the refill from then on only.
		dt := math.Max(now.Sub(since.at).Seconds()-allowance.Seconds(), 0)
		refill := b.rate() * dt
		// What was reserved from then on is surely not in R; what was
		// reserved in between may be, and is left to our own buckets
		// (they hold it already).
		taken := l.debited[d] - since.debited[d]
		if allowance > 0 {
			if before, ok := l.hist.before(since.at.Add(allowance - time.Nanosecond)); ok {
				taken = l.debited[d] - before[d]
			}
		}
		remaining += refill - taken + l.creditedSince(d, since.at.Add(2*allowance))
		lvl := b.at(now, b.dep())
		// A cluster node holds a share of the bucket the report is about:
		// the other nodes' debits are not ours to subtract, so no raise.
		lookback := since.at.Add(-allowance)
		if !since.from.IsZero() && !since.from.After(lookback) {
			lookback = since.from.Add(-time.Nanosecond) // its own debit is not charged
		}
		if before, ok := l.hist.before(lookback); raise && ok && b.part() == 1 {
			// No refill is credited: the provider charged the request
			// at some instant before its answer, maybe well after we
			// sent it (a busy CPU, a slow connection).
			raise := math.Min(sure, b.dep()) - (l.debited[d] - before[d])
			if raise > lvl {
				b.level = raise
			}
		}
		b.level = math.Min(b.level, remaining)
	}
}

// creditedSince is what Reconcile gave back in dimension d after t; l.mu
// held. When the history no longer reaches back to t, nothing (the
// lowering then stays conservative).
func (l *Limiter) creditedSince(d Dim, t time.Time) float64 {
	before, ok := l.credHist.before(t)
	if !ok {
		return 0
	}
	return l.credited[d] - before[d]
}

// Pause stops every admission until until (a RATE 429 pauses the whole
// upstream) and makes the buckets shallow again. An earlier instant than
// the current pause is ignored.
func (l *Limiter) Pause(until, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A 429: the margin widens back to SafetyMargin, then narrows again.
	l.widened = now
	l.refresh(now)
	if until.After(l.pausedUntil) {
		l.pausedUntil = until
	}
	for i := range l.b {
		b := &l.b[i]
		if b.capacity > 0 {
			b.settle(now)
			b.depth = l.initialDepth(b.capacity)
		}
	}
}

// PausedUntil returns the end of the current pause (zero when never paused).
func (l *Limiter) PausedUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pausedUntil
}

// WaitFor predicts how long until demand (which may exceed the capacity,
// e.g. the whole queue ahead plus one request) has been refilled, ignoring
// the depth. It is the basis for shedding requests that cannot make their
// deadline.
func (l *Limiter) WaitFor(demand Amount, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	var w time.Duration
	for i := range l.b {
		b := &l.b[i]
		if b.capacity == 0 || demand[i] <= 0 {
			continue
		}
		// A cluster node's share follows its demand (internal/cluster), so
		// the prediction counts on the whole bucket's rate, not the share
		// held now: a node that has just joined must not shed what its
		// share will soon serve.
		lvl := b.at(now, b.cp())
		if lvl < demand[i] {
			w = max(w, secs((demand[i]-lvl)/(b.rate()/b.part())))
		}
	}
	if p := l.pausedUntil.Sub(now); p > w {
		w = p
	}
	return w
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
	l.refresh(now)
	var s [NumDims]BucketState
	for i := range l.b {
		b := &l.b[i]
		s[i] = BucketState{Capacity: b.cp(), Depth: b.dep(), Reported: l.reported[i], ReportedAt: l.reportedAt[i]}
		if l.reportedAt[i].IsZero() {
			s[i].Reported.Remaining = -1
		}
		if b.capacity > 0 {
			s[i].Level = b.at(now, b.dep())
		}
	}
	return s
}
