package flow

import (
	"fmt"
	"sync"
	"time"
)

// BudgetWindowDefault is how far back requests and retries are counted.
const BudgetWindowDefault = 10 * time.Second

// RetryBudget caps retries at a ratio of recent requests so that retries
// cannot amplify an overload: over the last Window, retries ≤
// max(Min·Window, Ratio·requests). Counts live in one-second slots. It is
// safe for concurrent use.
type RetryBudget struct {
	mu     sync.Mutex
	ratio  float64
	min    float64
	slots  []budgetSlot
	window time.Duration
}

type budgetSlot struct {
	sec              int64
	requests, retrys float64
}

// NewRetryBudget returns a budget allowing ratio retries per request and
// minPerSecond retries per second (Envoy's budget_percent and
// min_retry_concurrency, Linkerd's retryRatio); a zero window takes
// BudgetWindowDefault.
func NewRetryBudget(ratio, minPerSecond float64, window time.Duration) (*RetryBudget, error) {
	if window == 0 {
		window = BudgetWindowDefault
	}
	switch {
	case ratio < 0 || ratio > 10:
		return nil, fmt.Errorf("BudgetRatio must be in [0, 10], got %v", ratio)
	case minPerSecond < 0:
		return nil, fmt.Errorf("BudgetMin must be >= 0, got %v", minPerSecond)
	case window < time.Second:
		return nil, fmt.Errorf("budget window must be >= 1s, got %v", window)
	}
	n := int(window / time.Second)
	return &RetryBudget{ratio: ratio, min: minPerSecond, window: time.Duration(n) * time.Second, slots: make([]budgetSlot, n)}, nil
}

func (b *RetryBudget) slot(now time.Time) *budgetSlot {
	sec := now.Unix()
	s := &b.slots[int(sec%int64(len(b.slots)))]
	if s.sec != sec {
		*s = budgetSlot{sec: sec}
	}
	return s
}

func (b *RetryBudget) totals(now time.Time) (requests, retries float64) {
	sec := now.Unix()
	for _, s := range b.slots {
		if sec-s.sec < int64(len(b.slots)) && s.sec <= sec {
			requests += s.requests
			retries += s.retrys
		}
	}
	return requests, retries
}

// RecordRequest counts one first attempt.
func (b *RetryBudget) RecordRequest(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slot(now).requests++
}

// TryRetry reports whether a retry is within budget, and counts it if so.
func (b *RetryBudget) TryRetry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	requests, retries := b.totals(now)
	allowed := max(b.min*b.window.Seconds(), b.ratio*requests)
	if retries+1 > allowed {
		return false
	}
	b.slot(now).retrys++
	return true
}
