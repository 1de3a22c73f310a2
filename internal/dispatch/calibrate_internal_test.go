package dispatch

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestCalibratorLearns: the input ratio converges on what the provider
// reports (within its bounds) and starts at 1; the output reservation is
// a high quantile of output/max_tokens, never above max_tokens, and only
// when learnOutput is set; other models are not affected.
func TestCalibratorLearns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		learnOutput bool
		inRatio     float64 // what the provider reports over the estimate
		wantIn      int64   // calibrated estimate of 1,000 input tokens
		wantOut     int64   // reservation for max_tokens 1,000
	}{
		{"overestimate", true, 0.8, 800, 960},
		{"underestimate", false, 1.25, 1250, 1000},
		{"bounded below", true, 0.1, 500, 960},
		{"bounded above", false, 5, 2000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCalibrator(tt.learnOutput)
			est := provider.Cost{Model: "m", InputTokens: 1000, OutputTokens: 1000}
			require.Equal(t, est, c.adjust(est), "nothing learned: the estimate as it is")
			rnd := rand.New(rand.NewPCG(1, 2))
			for range 500 {
				// Output uniform in [0.5, 0.95) of max_tokens: its 99th percentile
				// is in the 94-96% bin, reserved at its upper edge.
				out := 500 + rnd.Float64()*450
				c.observe(est, flow.NewAmount(int64(1000*tt.inRatio), int64(out)))
			}
			got := c.adjust(est)
			require.InDelta(t, tt.wantIn, got.InputTokens, 2)
			require.Equal(t, tt.wantOut, got.OutputTokens)
			require.Equal(t, provider.Cost{Model: "other", InputTokens: 1000, OutputTokens: 1000},
				c.adjust(provider.Cost{Model: "other", InputTokens: 1000, OutputTokens: 1000}))
		})
	}
}

// TestCalibratorWarmup: fewer than CalibrationWarmup answers change
// nothing.
func TestCalibratorWarmup(t *testing.T) {
	t.Parallel()
	c := newCalibrator(true)
	est := provider.Cost{Model: "m", InputTokens: 100, OutputTokens: 100}
	for range CalibrationWarmup - 1 {
		c.observe(est, flow.NewAmount(50, 10))
	}
	require.Equal(t, est, c.adjust(est))
	c.observe(est, flow.NewAmount(50, 10))
	require.Equal(t, provider.Cost{Model: "m", InputTokens: 50, OutputTokens: 10}, c.adjust(est))
}
