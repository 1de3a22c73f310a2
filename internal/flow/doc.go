// Package flow holds Sluice's flow-control algorithms: multi-dimension token
// buckets with reserve/reconcile, the weighted fair scheduler with client
// fairness and aging, the circuit breaker, backoff with jitter, the retry
// budget and adaptive concurrency. Every algorithm takes `now` as a parameter
// (or a clock.Clock), so tests run on a fake clock.
package flow
