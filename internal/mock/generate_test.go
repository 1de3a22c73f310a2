package mock

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOutputLengthDistribution(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		r                OutputRange
		maxTokens        int64
		wantMean, wantSD float64
		tolMean, tolSD   float64
		wantLo, wantHi   int64
	}{
		{"uniform", OutputRange{Min: 100, Max: 200}, 200, 150, 100 / math.Sqrt(12), 2, 2, 100, 200},
		{"normal", OutputRange{Min: 1, Mean: 150, StdDev: 30}, 400, 150, 30, 2, 2, 1, 400},
		// max_tokens cuts the tail: E[min(X, 160)] for X ~ N(150, 30) is 150 - 30 × 0.254.
		{"normal cut by max_tokens", OutputRange{Min: 1, Mean: 150, StdDev: 30}, 160, 142.4, 20.8, 1, 1, 1, 160},
		{"normal around the range's middle", OutputRange{Min: 40, Max: 60, StdDev: 5}, 200, 50, 5, 1, 1, 40, 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 20_000
			var sum, sq float64
			lo, hi := int64(math.MaxInt64), int64(0)
			for i := range n {
				v := outputLength(tc.r, 7, uint64(i)*0x9e3779b97f4a7c15, 0, tc.maxTokens)
				lo, hi = min(lo, v), max(hi, v)
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			mean := sum / n
			sd := math.Sqrt(sq/n - mean*mean)
			require.InDelta(t, tc.wantMean, mean, tc.tolMean)
			require.InDelta(t, tc.wantSD, sd, tc.tolSD)
			require.GreaterOrEqual(t, lo, tc.wantLo)
			require.LessOrEqual(t, hi, tc.wantHi)
		})
	}
}
