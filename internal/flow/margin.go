package flow

import (
	"math"
	"time"
)

// marginStep quantizes the adaptive margin, so a recovering margin
// resizes the buckets at most every 1/10,000th of its range.
const marginStep = 1e-4

// marginAt is the safety margin in force at now: MaxSafetyMargin while no
// 429 was seen, SafetyMargin at a 429, then linearly back to
// MaxSafetyMargin over MarginRecovery. It is bounded by the two: the
// Limiter never uses more than MaxSafetyMargin of a limit, and never less
// than SafetyMargin.
func (s *bucketSet) marginAt(now time.Time) float64 {
	lo, hi := s.cfg.SafetyMargin, s.cfg.MaxSafetyMargin
	if hi <= lo {
		return lo
	}
	if s.widened.IsZero() {
		return hi
	}
	ramp := s.cfg.MarginRecovery
	if ramp <= 0 {
		ramp = MarginRecoveryDefault
	}
	el := now.Sub(s.widened)
	if el >= ramp {
		return hi
	}
	el = max(el, 0)
	m := lo + (hi-lo)*float64(el)/float64(ramp)
	return math.Max(lo, math.Floor(m/marginStep)*marginStep)
}

// setMargin resizes every known bucket for margin m, keeping the depth's
// share of the capacity.
func (s *bucketSet) setMargin(m float64, now time.Time) {
	s.margin = m
	for i := range s.b {
		b := &s.b[i]
		if b.limit == 0 || b.capacity == 0 {
			continue
		}
		b.settle(now)
		c := s.withMargin(b.limit)
		b.depth = math.Min(c, b.depth*c/b.capacity)
		b.capacity = c
		b.level = math.Min(b.level, b.cp())
	}
}

// Margin returns the safety margin in force at now.
func (l *Limiter) Margin(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	return l.buckets.margin
}
