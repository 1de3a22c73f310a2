// Package dispatch is the engine that joins flow control and the provider
// protocols: one Dispatcher per upstream decides what is sent next, sends it
// with the upstream's key, classifies the outcome, and retries, reconciles
// or finishes. The proxy handlers and the in-process RoundTripper go through
// Do; the job workers take admission tickets (Acquire, TryAcquire) in the
// same scheduler and make exactly one call per ticket (Ticket.Call). Both
// paths decide what a call means with one function, DecideFate.
package dispatch
