package scenario

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values
// at or below it. It returns 0 for an empty slice; p <= 0 gives the minimum
// and p > 100 the maximum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summary is the latency distribution of a set of requests.
type Summary struct {
	// Count is the number of values summarized.
	Count int `json:"count"`
	// Avg is the arithmetic mean.
	Avg time.Duration `json:"avg_ns"`
	// P50, P95 and P99 are nearest-rank percentiles.
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	// Max is the largest value.
	Max time.Duration `json:"max_ns"`
}

// Summarize returns the distribution of values; the slice is not modified.
func Summarize(values []time.Duration) Summary {
	if len(values) == 0 {
		return Summary{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return Summary{
		Count: len(s),
		Avg:   time.Duration(sum / float64(len(s))),
		P50:   Percentile(s, 50),
		P95:   Percentile(s, 95),
		P99:   Percentile(s, 99),
		Max:   s[len(s)-1],
	}
}
