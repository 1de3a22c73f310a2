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
	// SpendOrphaned is called when the reservations a process left open
	// in the store when it ended (a crash) are charged to client at their
	// worst case, usd in all.
	SpendOrphaned(client string, usd float64)
	// SpendUndurable is called for each request of client (which has a
	// budget) sent without its reservation written to the store, which
	// did not answer in time: a crash before it settles and its spend is
	// flushed loses it.
	SpendUndurable(client string)
	// Refused is called for each request the layer refused before
	// anything was sent, on any door (a live request, a job's submit or
	// call, a batch): reason is the Refusal's (RefusedBudget,
	// RefusedServiceTier, RefusedAccess), message what the caller was
	// told.
	Refused(client, upstream, reason, message string)
	// Held is called for each job's call the layer held back (a *HeldError):
	// reason is HeldClientLimit or HeldFallbackAccess, limit names it.
	Held(client, upstream, reason, limit string)
	// FlexSpent is called when an answer served in OpenAI's flex tier
	// (FlexTier) is settled: usd is what it cost at the flex price,
	// standardUSD what the same usage costs in the standard tier (the
	// money the flex tier saved is the difference).
	FlexSpent(upstream string, usd, standardUSD float64)
}

// Hold reasons (Observer.Held).
const (
	// HeldClientLimit: the client's own limit on the upstream.
	HeldClientLimit = "client_limit"
	// HeldFallbackAccess: routed to a fallback the client may not use.
	HeldFallbackAccess = "fallback_access"
)

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Spent(string, string, string, float64)  {}
func (NopObserver) BudgetRefused(string, string, string)   {}
func (NopObserver) FallbackTaken(string, string, string)   {}
func (NopObserver) SpendOrphaned(string, float64)          {}
func (NopObserver) SpendUndurable(string)                  {}
func (NopObserver) Refused(string, string, string, string) {}
func (NopObserver) Held(string, string, string, string)    {}
func (NopObserver) FlexSpent(string, float64, float64)     {}

// refused tells the observer of a budget refusal.
func (sp *spender) refused(client string, err error) {
	window, reason := "", "unknown_model"
	if errors.Is(err, ErrSpendNotLoaded) {
		reason = "store_not_connected"
	}
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
