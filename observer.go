package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Observer receives a Transport's engine events (see WithObserver), e.g.
// to export metrics. Methods are called on the request path, some while
// the engine holds its lock: they must be fast and must not block. Embed
// NopObserver to implement only some of them; methods may be added.
type Observer interface {
	// Enqueued: a request joined its class's queue.
	Enqueued(p Priority)
	// Admitted: a request was sent for the first time, after waiting
	// queueWait in the queue.
	Admitted(p Priority, queueWait time.Duration)
	// Attempted: an upstream attempt ended with outcome (success, rate,
	// overload, transient, quota, client_error or stream_fail) and status
	// (0 for a transport error) after latency (to the response headers, or
	// to the first content of a stream).
	Attempted(outcome string, status int, latency time.Duration)
	// Retried: a request goes back into the queue after outcome.
	Retried(outcome string)
	// Shed: a request was refused or given up without an upstream answer;
	// reason says why.
	Shed(p Priority, reason error)
	// BreakerChanged: the circuit breaker moved between closed, open and
	// half_open.
	BreakerChanged(from, to string)
	// Reconciled: a finished request's estimated and reported tokens.
	Reconciled(estimated, actual Tokens)
}

// Tokens are a request's input and output tokens.
type Tokens struct {
	// Input is the prompt tokens.
	Input int64
	// Output is the completion tokens (for an estimate, the reservation:
	// max_tokens).
	Output int64
}

// NopObserver ignores every event; embed it in an Observer.
type NopObserver struct{}

func (NopObserver) Enqueued(Priority)                    {}
func (NopObserver) Admitted(Priority, time.Duration)     {}
func (NopObserver) Attempted(string, int, time.Duration) {}
func (NopObserver) Retried(string)                       {}
func (NopObserver) Shed(Priority, error)                 {}
func (NopObserver) BreakerChanged(string, string)        {}
func (NopObserver) Reconciled(Tokens, Tokens)            {}

// WithObserver sets the Observer of a Transport's engine. Defaults to none.
func WithObserver(o Observer) Option { return func(opts *options) { opts.observer = o } }

// observerAdapter turns the engine's events into the public Observer's.
type observerAdapter struct {
	dispatch.NopObserver // events the public Observer does not (yet) have
	o                    Observer
}

func (a observerAdapter) Enqueued(c llm.Priority) { a.o.Enqueued(Priority(c)) }

func (a observerAdapter) Admitted(c llm.Priority, wait time.Duration) {
	a.o.Admitted(Priority(c), wait)
}

func (a observerAdapter) Attempted(k llm.OutcomeKind, status int, latency time.Duration) {
	a.o.Attempted(k.String(), status, latency)
}

func (a observerAdapter) Retried(k llm.OutcomeKind)         { a.o.Retried(k.String()) }
func (a observerAdapter) Shed(c llm.Priority, reason error) { a.o.Shed(Priority(c), reason) }
func (a observerAdapter) BreakerStateChanged(from, to flow.BreakerState) {
	a.o.BreakerChanged(from.String(), to.String())
}

func (a observerAdapter) Reconciled(est provider.Cost, actual llm.Usage) {
	a.o.Reconciled(Tokens{Input: est.InputTokens, Output: est.OutputTokens},
		Tokens{Input: actual.InputTokens, Output: actual.OutputTokens})
}
