// Package dispatch is the engine that joins flow control and the provider
// protocols: one Dispatcher per upstream decides what is sent next, sends it
// with the upstream's key, classifies the outcome, and retries, reconciles
// or finishes. The proxy handlers, the in-process RoundTripper and the job
// workers all go through it.
package dispatch
