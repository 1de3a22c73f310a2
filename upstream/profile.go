package upstream

import (
	"cmp"
	"fmt"
	"time"
)

// Profile presets an upstream's class, retry and quota settings in one
// word. A profile fills only the fields left zero; the defaults then fill
// the rest, so an explicitly set field always wins.
type Profile string

// The profiles (docs/config.md has the table of what each sets).
const (
	// Balanced is today's defaults: nothing is preset beyond them.
	Balanced Profile = "balanced"
	// Latency is for interactive traffic: short waits, quick retries, and
	// more of each bucket kept for urgent arrivals.
	Latency Profile = "latency"
	// Throughput is for offline and batch traffic: long waits and patient
	// retries, so work waits for quota instead of failing.
	Throughput Profile = "throughput"
)

// ParseProfile returns the profile named s.
func ParseProfile(s string) (Profile, error) {
	if _, ok := profiles[Profile(s)]; !ok {
		return "", fmt.Errorf("unknown profile %q (want latency, throughput or balanced)", s)
	}
	return Profile(s), nil
}

// preset is what a profile sets; zero fields set nothing.
type preset struct {
	weights  [NumPriorities]float64
	maxWait  [NumPriorities]time.Duration
	headroom [NumPriorities]float64
	// burstRoom is the cap of the learned room for urgent bursts.
	burstRoom float64
	retry     Retry
}

// profiles are the presets, each value with its reason.
var profiles = map[Profile]preset{
	Balanced: {},
	Latency: {
		// Critical overtakes harder under saturation: twice balanced's share.
		weights: [NumPriorities]float64{16, 4, 2, 1},
		// A user is waiting: a 429 after 10 s beats an answer after a minute.
		maxWait: [NumPriorities]time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute},
		// Keep more of each bucket for urgent arrivals, so a critical request
		// is admitted at once even right after a burst of lower traffic.
		headroom: [NumPriorities]float64{0, 0.20, 0.30, 0.30},
		// Keep up to 80 % of each bucket for the bursts urgent traffic was
		// seen to send: batch work loses more of its start, a user waits
		// less.
		burstRoom: 0.8,
		// Retry quickly and give up after under 1 s of backoff (200 ms and 400 ms ceilings), so the caller
		// can fall back while its user still waits.
		retry: Retry{BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second, MaxAttempts: 3},
	},
	Throughput: {
		// Queued work waits for quota instead of failing and being resubmitted.
		maxWait: [NumPriorities]time.Duration{2 * time.Minute, 10 * time.Minute, 30 * time.Minute, 2 * time.Hour},
		// Keep at most a quarter of each bucket for urgent bursts: the
		// batch keeps more of the bucket, an urgent burst larger than that
		// waits for refill.
		burstRoom: 0.25,
		// Ride out an overload of a minute or more: nobody is waiting on the
		// answer, and a failed request costs a resubmission.
		retry: Retry{BaseDelay: time.Second, MaxDelay: 30 * time.Second, MaxAttempts: 8},
	},
}

// fill sets c's zero fields to the preset's values.
func (p preset) fill(c Config) Config {
	for i := range Priority(NumPriorities) {
		cl := c.Classes.ptr(i)
		cl.Weight = cmp.Or(cl.Weight, p.weights[i])
		cl.MaxWait = cmp.Or(cl.MaxWait, p.maxWait[i])
		cl.Headroom = cmp.Or(cl.Headroom, p.headroom[i])
	}
	c.BurstRoom = cmp.Or(c.BurstRoom, p.burstRoom)
	if c.Retry.MaxDelay == 0 && p.retry.MaxDelay != 0 {
		// An explicit base_delay above the preset's cap raises the cap.
		c.Retry.MaxDelay = max(p.retry.MaxDelay, c.Retry.BaseDelay)
	}
	c.Retry.BaseDelay = cmp.Or(c.Retry.BaseDelay, p.retry.BaseDelay)
	c.Retry.MaxAttempts = cmp.Or(c.Retry.MaxAttempts, p.retry.MaxAttempts)
	c.Retry.BudgetRatio = cmp.Or(c.Retry.BudgetRatio, p.retry.BudgetRatio)
	c.Retry.BudgetMin = cmp.Or(c.Retry.BudgetMin, p.retry.BudgetMin)
	return c
}
