package flow

import (
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// What an upstream's engine tells a cluster and hears from it. The types
// are plain data, defined once here because both sides use them: the
// dispatcher fills and applies them, the cluster node (internal/cluster)
// shares them through its store.

// ClusterLoad is what a node reports of one upstream at a cluster sync,
// to share its quota with the other nodes.
type ClusterLoad struct {
	// Queued is the estimated cost queued per class (critical first).
	Queued [llm.NumPriorities]Amount
	// QueuedCount is the number of requests queued per class.
	QueuedCount [llm.NumPriorities]int
	// Weights are the classes' scheduling weights.
	Weights [llm.NumPriorities]float64
	// InFlight is how many requests are being sent.
	InFlight int
	// Debited is the limiter's running sum of debits (ClusterShare.Debited).
	Debited Amount
	// UrgentDebited is the running sum of the estimates admitted for the
	// urgent classes (critical and high): the part of the node's use a
	// cluster keeps room for (cluster.Demand).
	UrgentDebited Amount
	// Capacity is each dimension's whole per-minute capacity (after the
	// safety margin, before this node's share); 0 unknown.
	Capacity [NumDims]float64
	// MaxConcurrency is the configured max_concurrency.
	MaxConcurrency int
	// PausedUntil is the end of this node's pause of the upstream.
	PausedUntil time.Time
	// Breaker is the circuit breaker's state, and BreakerOpenUntil the
	// end of its open period while it is Open (zero otherwise).
	Breaker          BreakerState
	BreakerOpenUntil time.Time
	// BurstDepth is each dimension's whole burst depth (Limiter.
	// BurstDepth, summed over the pool's keys); 0 unknown.
	BurstDepth [NumDims]float64
	// BurstLevel is the buckets' fill as a fraction of the whole burst
	// (ClusterShare.BurstFill, the least over the pool's bucket sets), and
	// BurstSeconds how long the whole rate takes to refill a whole burst
	// (the least); both 0 when nothing is limited.
	BurstLevel, BurstSeconds float64
}

// ClusterReport is what the provider's rate-limit headers reported of one
// dimension of one provider key, as a cluster shares it: the latest limit
// (and when it was learned) and the latest remaining (with when the
// request it answered was sent, when the answer came and the reset).
type ClusterReport struct {
	// Account is the provider key's fingerprint (an upstream with a key
	// pool has one per key).
	Account string
	// Dim is the dimension reported.
	Dim Dim
	Heard
	// LimitNode and RemainingNode name the nodes whose reports the
	// cluster's store kept: set in what a node hears from the cluster,
	// unset (and ignored) in what it reports.
	LimitNode     string
	RemainingNode string
}
