package dispatch_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestOvershootNamesTheCause: a 429 counts as the engine's own overshoot
// only when it knew the limit the provider says is exhausted.
func TestOvershootNamesTheCause(t *testing.T) {
	t.Parallel()
	knownOutput := [flow.NumDims]flow.BucketState{}
	knownOutput[flow.OutputTokens].Capacity = 1000
	none := [flow.NumDims]flow.BucketState{}
	outputOut := provider.RateLimits{provider.DimOutputTokens: {Limit: 1000, Remaining: 0},
		provider.DimRequests: {Limit: 50, Remaining: 10}}
	requestsOut := provider.RateLimits{provider.DimRequests: {Limit: 50, Remaining: 0}}
	for _, tc := range []struct {
		name  string
		rl    provider.RateLimits
		known [flow.NumDims]flow.BucketState
		want  bool
	}{
		{"the exhausted limit was known", outputOut, knownOutput, true},
		{"another limit was exhausted", requestsOut, knownOutput, false},
		{"nothing was known", outputOut, none, false},
		{"no headers, a limit known", nil, knownOutput, true},
		{"no headers, nothing known", nil, none, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, dispatch.Overshoot(tc.rl, tc.known))
		})
	}
}
