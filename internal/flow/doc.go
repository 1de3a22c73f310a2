// Package flow holds Sluice's flow-control algorithms: multi-dimension
// token buckets that mirror a provider's quota (Limiter: reserve,
// reconcile, refund, observe the provider's reports, a cluster node's
// share), the room kept for urgent classes' bursts (BurstRoom, Keep), the
// weighted fair scheduler with client fairness and aging (Scheduler), the
// circuit breaker (Breaker), backoff with jitter (Backoff), the retry
// budget (RetryBudget) and adaptive concurrency (AIMD), and the load and
// provider reports an upstream shares with a cluster (ClusterLoad,
// ClusterReport). Every algorithm takes `now` as a parameter, so tests run
// on a fake clock.
package flow
