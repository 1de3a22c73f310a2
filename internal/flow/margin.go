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
func (l *Limiter) marginAt(now time.Time) float64 {
	lo, hi := l.cfg.SafetyMargin, l.cfg.MaxSafetyMargin
	if hi <= lo {
		return lo
	}
	if l.widened.IsZero() {
		return hi
	}
	ramp := l.cfg.MarginRecovery
	if ramp <= 0 {
		ramp = MarginRecoveryDefault
	}
	el := now.Sub(l.widened)
	if el >= ramp {
		return hi
	}
	el = max(el, 0)
	m := lo + (hi-lo)*float64(el)/float64(ramp)
	return math.Max(lo, math.Floor(m/marginStep)*marginStep)
}

// setMargin resizes every known bucket for margin m, keeping the depth's
// share of the capacity; l.mu held.
func (l *Limiter) setMargin(m float64, now time.Time) {
	l.margin = m
	for i := range l.b {
		b := &l.b[i]
		if b.limit == 0 || b.capacity == 0 {
			continue
		}
		b.settle(now)
		c := l.withMargin(b.limit)
		b.depth = math.Min(c, b.depth*c/b.capacity)
		b.capacity = c
		b.level = math.Min(b.level, b.cp())
	}
}

// Margin returns the safety margin in force at now.
func (l *Limiter) Margin(now time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh(now)
	return l.margin
}

// debitHistoryLen is how many recent entries a debitHistory keeps (of
// debits for Observe and the credit cap, of credits for the clamp).
const debitHistoryLen = 256

// debitHistory is a ring of (instant, debited) after each debit, so that
// Observe can tell what was debited before an instant.
type debitHistory struct {
	at      [debitHistoryLen]time.Time
	debited [debitHistoryLen]Amount
	n       int // entries recorded, ever
}

func (h *debitHistory) record(now time.Time, debited Amount) {
	i := h.n % debitHistoryLen
	h.at[i], h.debited[i] = now, debited
	h.n++
}

// before returns what was debited as of t (the last entry at or before t);
// ok is false when the ring no longer reaches back to t.
func (h *debitHistory) before(t time.Time) (Amount, bool) {
	for k := 1; k <= min(h.n, debitHistoryLen); k++ {
		i := (h.n - k) % debitHistoryLen
		if !h.at[i].After(t) {
			return h.debited[i], true
		}
	}
	if h.n <= debitHistoryLen {
		return Amount{}, true // before the first debit: nothing debited
	}
	return Amount{}, false
}
