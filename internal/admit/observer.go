package admit

import (
	"errors"

	"github.com/sluicehq/sluice/internal/quota"
)

// Observer receives the admission layer's events; the metrics adapter at
// the edge implements it. Every method must be fast and must not block.
type Observer interface {
	// Spent is called when a request's cost is settled (usd > 0), with
	// the client, the upstream that served it and the price table's entry.
	Spent(client, upstream, model string, usd float64)
	// BudgetRefused is called for each request a budget refused: window
	// is day, month, total or "" (an unpriced model); reason is
	// exhausted, pending, too_large or unknown_model.
	BudgetRefused(client, window, reason string)
	// FallbackTaken is called when a request (live or a job's call) is
	// sent to a fallback of upstream for reason (unavailable, deadline).
	FallbackTaken(upstream, fallback, reason string)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Spent(string, string, string, float64) {}
func (NopObserver) BudgetRefused(string, string, string)  {}
func (NopObserver) FallbackTaken(string, string, string)  {}

// refused tells the observer of a budget refusal.
func (sp *spender) refused(client string, err error) {
	window, reason := "", "unknown_model"
	if e, ok := errors.AsType[*quota.ExceededError](err); ok {
		window, reason = string(e.Window), "exhausted"
		switch {
		case e.TooLarge:
			reason = "too_large"
		case e.Pending:
			reason = "pending"
		}
	}
	sp.obs.BudgetRefused(client, window, reason)
}
