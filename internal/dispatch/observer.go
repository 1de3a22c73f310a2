package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// Observer receives the engine's events, for metrics. Every method must be
// O(1) and never block: they are called on the request path, some while the
// dispatcher holds its lock. Embed NopObserver to implement only some.
type Observer interface {
	// Enqueued: a request joined the queue.
	Enqueued(class flow.Priority)
	// Admitted: a request was sent for the first time after queueWait.
	Admitted(class flow.Priority, queueWait time.Duration)
	// Attempted: an upstream attempt ended with outcome (status 0 for a
	// transport error) after latency (to response headers, or to the first
	// content for streams).
	Attempted(outcome provider.Class, status int, latency time.Duration)
	// Retried: a request goes back into the queue after outcome.
	Retried(outcome provider.Class)
	// Shed: a request was refused or given up without an upstream answer;
	// reason is ErrShed, ErrDeadline, ErrTooLarge, ErrRetriesExhausted,
	// ErrRetryBudget or ErrStopped.
	Shed(class flow.Priority, reason error)
	// BreakerStateChanged: the circuit breaker moved from one state to
	// another.
	BreakerStateChanged(from, to flow.BreakerState)
	// Reconciled: a finished request's estimated and actual tokens.
	Reconciled(estimated provider.Cost, actual provider.Usage)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) Enqueued(flow.Priority)                                   {}
func (NopObserver) Admitted(flow.Priority, time.Duration)                    {}
func (NopObserver) Attempted(provider.Class, int, time.Duration)             {}
func (NopObserver) Retried(provider.Class)                                   {}
func (NopObserver) Shed(flow.Priority, error)                                {}
func (NopObserver) BreakerStateChanged(flow.BreakerState, flow.BreakerState) {}
func (NopObserver) Reconciled(provider.Cost, provider.Usage)                 {}
