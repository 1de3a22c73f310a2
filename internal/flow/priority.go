package flow

import "github.com/sluicehq/sluice/internal/llm"

// HeadroomDefault is, per class, the share of each quota bucket's depth a
// request of that class must leave unused (see Limiter.ReserveKeeping):
// under saturation the buckets idle at 20% of their depth for normal and
// low traffic (room for a few critical requests at once: at 10% the
// priority benchmark's critical p95 was still 2x its unloaded value, as two
// critical arrivals close together had to wait for a refill), and high
// traffic may use half of that.
var HeadroomDefault = [llm.NumPriorities]float64{0, 0.10, 0.20, 0.20}
