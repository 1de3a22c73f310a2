package scenario

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchRouteScenario runs the batch-route scenario small: both paths
// finish every job once, the routed one at the provider's batch bill and
// half the synchronous cost, with fewer provider calls. Not parallel: the
// scenario moves its fake clock from rest to rest (clock.Settle), which
// needs the process to itself.
func TestBatchRouteScenario(t *testing.T) { //nolint:paralleltest // see above
	s, err := Lookup("batch-route")
	require.NoError(t, err)
	r, err := s.Run(t.Context(), Options{Quick: true, Seed: 7})
	require.NoError(t, err)
	require.True(t, r.Met(), "%+v", r.Checks)
	require.Zero(t, r.Figures["routed_duplicates"])
	require.Less(t, r.Figures["routed_provider_calls"], r.Figures["synchronous_provider_calls"])
	require.Greater(t, r.Figures["routed_mock_time_s"], r.Figures["synchronous_mock_time_s"], "the routed jobs wait for the batch")
	require.InDelta(t, r.Figures["synchronous_cost_usd"]/2, r.Figures["saved_usd"], 0.01)
}
