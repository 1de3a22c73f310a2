package scenario

import "time"

// DimNeed is one quota dimension of a workload: how much the whole workload
// needs and how fast the provider refills it.
type DimNeed struct {
	// Name names the dimension in reports ("requests", "input tokens", …).
	Name string
	// Total is what the whole workload consumes in this dimension.
	Total float64
	// PerMinute is the provider's limit; 0 means unlimited.
	PerMinute float64
}

// IdealDrain returns the shortest time in which a provider whose buckets
// refill at PerMinute/60 per second and start full at depthSeconds of refill
// can serve the workload, and the dimension that binds:
//
//	rate_d  = PerMinute_d / 60
//	depth_d = depthSeconds × rate_d
//	ideal   = max over d of max(0, Total_d − depth_d) / rate_d
//
// The full bucket is spent at once; everything beyond it arrives at the
// refill rate. Latency of the last request is not included. Unlimited
// dimensions are skipped; with none limited the ideal is 0.
func IdealDrain(needs []DimNeed, depthSeconds float64) (time.Duration, string) {
	var best float64
	binding := ""
	for _, n := range needs {
		if n.PerMinute <= 0 {
			continue
		}
		rate := n.PerMinute / 60
		t := max(0, n.Total-depthSeconds*rate) / rate
		if binding == "" || t > best {
			best, binding = t, n.Name
		}
	}
	return time.Duration(best * float64(time.Second)), binding
}
