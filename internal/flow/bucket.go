package flow

import (
	"fmt"
	"math"
	"time"
)

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
	scale    float64 // refill-rate multiplier from SlowDown; 0 means 1
	share    float64 // this node's share of the capacity (SetShare); 0 means 1
	// seen is the most the provider has reported this bucket holding
	// (Observe's sure level); 0 before any report. A provider may keep a
	// shallower bucket than depth (a per-minute limit enforced over a
	// second): the level never exceeds what it reports, so a room kept
	// for urgent classes is a share of what it was seen to hold.
	seen float64
}

// roomDepth bounds the depth a room for urgent classes (Keep) is a share
// of: dep, or what the provider was seen to hold when that is less.
func (b *bucket) roomDepth(dep float64) float64 {
	if b.seen > 0 {
		return math.Min(dep, b.seen*b.part())
	}
	return dep
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
// only needs the bucket full, unless strict: it then does not fit, and
// the wait is until the bucket is full, at least StrictRecheck (what
// lets it go is the keep changing, which the caller knows).
func (b *bucket) wait(cost, hold float64, strict bool, now time.Time) time.Duration {
	if b.capacity == 0 || cost <= 0 {
		return 0
	}
	c := math.Max(b.dep(), cost)
	need := math.Min(cost+hold, c)
	lvl := b.at(now, c)
	if strict && cost+hold > c {
		return max(secs((c-lvl)/b.rate()), StrictRecheck)
	}
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

// bucketSet is the Limiter's bucket arithmetic: one bucket per dimension,
// each sized from its per-minute limit by the safety margin in force
// (margin.go), refilling at the Slow Down multiplier, and holding this
// node's share of the bucket (SetShare); and the pause. It knows nothing
// of the provider's reports: Observe and Adopt set its levels. Not safe
// for concurrent use: the Limiter holds its mutex around every call.
type bucketSet struct {
	cfg         LimiterConfig
	b           [NumDims]bucket
	pausedUntil time.Time
	slow        slowDown
	// share is this node's share of every bucket (SetShare), in (0, 1].
	share float64
	// margin is the safety margin in force (see marginAt); widened is
	// the last 429 (Pause), zero when none was seen.
	margin  float64
	widened time.Time
	// claim is a waiting head's claim against the admissions past it
	// (claim.go).
	claim claim
}

// newBucketSet returns full buckets for cfg's known limits at now.
func newBucketSet(cfg LimiterConfig, now time.Time) bucketSet {
	s := bucketSet{cfg: cfg, share: 1}
	s.margin = s.marginAt(now)
	for i, lim := range cfg.Limits {
		if lim > 0 {
			s.setLimit(Dim(i), lim, now)
		}
	}
	return s
}

// refresh settles every bucket at the rate it had, then applies the
// margin and the Slow Down multiplier in force at now.
func (s *bucketSet) refresh(now time.Time) {
	if m := s.marginAt(now); m != s.margin {
		s.setMargin(m, now)
	}
	f := s.slow.scaleAt(now)
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 || b.scale == f || (b.scale == 0 && f == 1) {
			continue
		}
		b.settle(now)
		b.scale = f
	}
	if f == 1 {
		s.slow = slowDown{}
	}
}

// withMargin applies the safety margin, never leaving less than one unit
// of a limit of at least one (1 RPM stays usable).
func (s *bucketSet) withMargin(limit float64) float64 {
	return math.Max(limit*s.margin, math.Min(limit, 1))
}

func (s *bucketSet) initialDepth(capacity float64) float64 {
	return s.lessJitter(capacity, math.Min(capacity, capacity/60*s.cfg.BurstSeconds))
}

// headroomDepth is the depth a headroom share applies to: the configured
// burst (BurstSeconds), not a depth learned from the provider. The
// headroom is there for an urgent request to be admitted at once; a
// deeper provider bucket does not need more of it left unused, and what
// is left unused is refill lost when the queue runs dry.
func (s *bucketSet) headroomDepth(b *bucket) float64 {
	return math.Min(b.dep(), s.initialDepth(b.capacity)*b.part())
}

// lessJitter takes the jitter allowance (at capacity's refill rate) off a
// depth, keeping at least half of it.
func (s *bucketSet) lessJitter(capacity, depth float64) float64 {
	if s.cfg.JitterAllowance <= 0 {
		return depth
	}
	return math.Max(depth/2, depth-capacity/60*s.cfg.JitterAllowance.Seconds())
}

// learn sizes bucket d for a limit the provider reported (Observe) or a
// cluster shared (Adopt): at most the configured limit, if any.
func (s *bucketSet) learn(d Dim, reported float64, now time.Time) {
	want := reported
	if configured := s.cfg.Limits[d]; configured > 0 {
		want = math.Min(want, configured)
	}
	if want != s.b[d].limit {
		s.setLimit(d, want, now)
	}
}

// setLimit (re)sizes a bucket for a per-minute limit: its capacity is
// the limit times the margin in force.
func (s *bucketSet) setLimit(d Dim, limit float64, now time.Time) {
	s.b[d].limit = limit
	s.setCapacity(d, s.withMargin(limit), now)
}

// setCapacity (re)sizes a bucket.
func (s *bucketSet) setCapacity(d Dim, capacity float64, now time.Time) {
	b := &s.b[d]
	b.settle(now)
	b.share = s.share
	if b.capacity == 0 {
		// A new bucket starts full, like the provider's; reads are capped
		// at the depth, so only a big request can use more than that.
		b.depth = s.initialDepth(capacity)
		b.level = capacity
	} else {
		b.depth = math.Min(capacity, math.Max(b.depth, s.initialDepth(capacity)))
	}
	b.capacity = capacity
	b.level = math.Min(b.level, b.cp())
	b.last = now
}

// deepen makes bucket d at least as deep as what the provider surely
// holds (less the jitter allowance), up to its capacity.
func (s *bucketSet) deepen(d Dim, sure float64) {
	b := &s.b[d]
	if room := s.lessJitter(b.capacity, sure); room > b.depth {
		b.depth = math.Min(b.capacity, room)
	}
}

// timeUntil is how long until cost fits leaving keep, and the pause is
// over; ErrTooLarge when a cost exceeds a bucket's capacity.
func (s *bucketSet) timeUntil(cost Amount, keep Keep, now time.Time) (time.Duration, error) {
	var w time.Duration
	for i := range s.b {
		b := &s.b[i]
		if b.capacity > 0 && cost[i] > b.capacity {
			return 0, fmt.Errorf("%w: %s cost %.0f > capacity %.0f", ErrTooLarge, Dim(i), cost[i], b.capacity)
		}
		w = max(w, b.wait(cost[i], s.hold(Dim(i), keep), keep.strict(), now))
	}
	if keep.Past {
		w = max(w, s.passWait(cost, now))
	}
	if p := s.pausedUntil.Sub(now); p > w {
		w = p
	}
	return w, nil
}

// take debits cost from every limited bucket, and counts it against a
// waiting head's claim; timeUntil said it fits.
func (s *bucketSet) take(cost Amount, now time.Time) {
	s.took(cost)
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		b.level = math.Min(b.level, math.Max(b.dep(), cost[i])) - cost[i]
	}
}

// put returns amount to the buckets (a negative part debits). A credit
// raises a level at most to the depth less pending, what may not have
// reached the provider yet; when the debit history is too short to tell
// (held false), not above the current level.
func (s *bucketSet) put(amount, pending Amount, held bool, now time.Time) {
	for i := range s.b {
		b := &s.b[i]
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

// restore gives back a reservation made at the same instant, exactly.
func (s *bucketSet) restore(cost Amount, now time.Time) {
	s.took(Amount{}.Sub(cost))
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 {
			continue
		}
		b.settle(now)
		b.level += cost[i]
	}
}

// pause stops admissions until until (a later instant only), widens the
// margin and makes every bucket shallow again.
func (s *bucketSet) pause(until, now time.Time) {
	// A 429: the margin widens back to SafetyMargin, then narrows again.
	s.widened = now
	s.refresh(now)
	if until.After(s.pausedUntil) {
		s.pausedUntil = until
	}
	for i := range s.b {
		b := &s.b[i]
		if b.capacity > 0 {
			b.settle(now)
			b.depth = s.initialDepth(b.capacity)
		}
	}
}

// waitFor is how long until demand has been refilled at the whole
// bucket's rate, ignoring the depth, and the pause is over.
func (s *bucketSet) waitFor(demand Amount, now time.Time) time.Duration {
	var w time.Duration
	for i := range s.b {
		b := &s.b[i]
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
	if p := s.pausedUntil.Sub(now); p > w {
		w = p
	}
	return w
}

// slowDown is a refill-rate cut that ramps linearly back to the full rate.
type slowDown struct {
	factor float64 // the multiplier at since
	since  time.Time
	ramp   time.Duration // 0: no cut
}

// scaleAt is the refill-rate multiplier at now.
func (t slowDown) scaleAt(now time.Time) float64 {
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

// slowDown compounds a cut of factor, ramping back over ramp, onto the
// one in force at now, down to SlowDownFloor.
func (s *bucketSet) slowDown(factor float64, ramp time.Duration, now time.Time) {
	s.refresh(now)
	if !(factor > 0 && factor < 1) || ramp <= 0 {
		return
	}
	s.slow = slowDown{factor: math.Max(s.slow.scaleAt(now)*factor, SlowDownFloor), since: now, ramp: ramp}
	s.refresh(now)
}
