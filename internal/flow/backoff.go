package flow

import (
	"fmt"
	"math"
	"time"
)

// RateJitterDefault is the most added on top of a server's retry hint.
const RateJitterDefault = 250 * time.Millisecond

// Backoff computes retry delays. Delay is "full jitter" (AWS): uniform in
// [0, min(Max, Base·2^retry)). RateDelay waits a server hint plus a small
// positive jitter, never less than the hint. Randomness is passed in as u
// in [0, 1), so the functions are pure.
type Backoff struct {
	// Base is the first retry's ceiling, > 0. Required (the engine's comes
	// from upstream.Config, a job's from jobs.Config).
	Base time.Duration
	// Max caps the ceiling, >= Base. Required.
	Max time.Duration
	// RateJitter is the most added to a retry hint. Defaults to
	// RateJitterDefault.
	RateJitter time.Duration
}

// WithDefaults returns b with RateJitter set to its default when zero.
func (b Backoff) WithDefaults() Backoff {
	if b.RateJitter == 0 {
		b.RateJitter = RateJitterDefault
	}
	return b
}

// Validate reports a field out of range.
func (b Backoff) Validate() error {
	switch {
	case b.Base <= 0:
		return fmt.Errorf("BaseDelay must be > 0, got %v", b.Base)
	case b.Max < b.Base:
		return fmt.Errorf("MaxDelay (%v) must be >= BaseDelay (%v)", b.Max, b.Base)
	case b.RateJitter < 0:
		return fmt.Errorf("RateJitter must be >= 0, got %v", b.RateJitter)
	}
	return nil
}

// Ceiling returns min(Max, Base·2^retry); retry 0 is the first retry.
func (b Backoff) Ceiling(retry int) time.Duration {
	c := float64(b.Base) * math.Pow(2, float64(max(retry, 0)))
	if c > float64(b.Max) || math.IsInf(c, 0) {
		return b.Max
	}
	return time.Duration(c)
}

// Delay returns the full-jitter delay for retry (0 = first retry) given u
// in [0, 1).
func (b Backoff) Delay(retry int, u float64) time.Duration {
	return time.Duration(clampUnit(u) * float64(b.Ceiling(retry)))
}

// RateDelay returns hint plus up to RateJitter, given u in [0, 1).
func (b Backoff) RateDelay(hint time.Duration, u float64) time.Duration {
	return max(hint, 0) + time.Duration(clampUnit(u)*float64(b.RateJitter))
}

func clampUnit(u float64) float64 {
	if !(u >= 0) {
		return 0
	}
	return math.Min(u, 1)
}
