package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Observer receives the engine's events, for metrics. Every method must be
// O(1) and never block: they are called on the request path, some while the
// dispatcher holds its lock. Embed NopObserver to implement only some.
type Observer interface {
	// Enqueued: a request joined the queue.
	Enqueued(class llm.Priority)
	// Admitted: a request was sent for the first time after queueWait.
	Admitted(class llm.Priority, queueWait time.Duration)
	// Attempted: an upstream attempt ended with outcome (status 0 for a
	// transport error) after latency (to response headers, or to the first
	// content for streams).
	Attempted(outcome llm.OutcomeKind, status int, latency time.Duration)
	// Retried: a request goes back into the queue after outcome.
	Retried(outcome llm.OutcomeKind)
	// Shed: a request was refused or given up without an upstream answer;
	// reason is ErrShed, ErrDeadline, ErrTooLarge, ErrRetriesExhausted,
	// ErrRetryBudget or ErrStopped.
	Shed(class llm.Priority, reason error)
	// BreakerStateChanged: the circuit breaker moved from one state to
	// another.
	BreakerStateChanged(from, to flow.BreakerState)
	// Reconciled: a finished request's estimated and actual tokens.
	Reconciled(estimated provider.Cost, actual llm.Usage)
	// RateLimited: the provider answered 429 (or OpenAI's 503 "Slow
	// Down"). overshoot is true when the engine knew the limit of the
	// exhausted dimension and admitted past it (its own estimate or depth
	// overshot), false when no limit it knew was involved (a quota it had
	// not been told or not yet learned, or one shared with other callers).
	RateLimited(overshoot bool)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Enqueued(llm.Priority)                                    {}
func (NopObserver) Admitted(llm.Priority, time.Duration)                     {}
func (NopObserver) Attempted(llm.OutcomeKind, int, time.Duration)            {}
func (NopObserver) Retried(llm.OutcomeKind)                                  {}
func (NopObserver) Shed(llm.Priority, error)                                 {}
func (NopObserver) BreakerStateChanged(flow.BreakerState, flow.BreakerState) {}
func (NopObserver) Reconciled(provider.Cost, llm.Usage)                      {}
func (NopObserver) RateLimited(bool)                                         {}
