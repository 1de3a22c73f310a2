package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

func TestForceBreakerHoldsOpenUntilReset(t *testing.T) {
	t.Parallel()
	b, err := flow.NewBreaker(flow.BreakerConfig{Window: time.Minute, ConsecutiveFailures: 3, MinRequests: 10,
		FailureRatio: 0.5, OpenTimeout: time.Second, HalfOpenProbes: 1}, nil, nil, time.Unix(0, 0))
	require.NoError(t, err)
	now := time.Unix(100, 0)
	require.Equal(t, flow.Closed, b.Force(flow.Open, now))
	st, readyAt := b.State(now.Add(time.Hour))
	require.Equal(t, flow.Open, st, "held open past the open timeout")
	require.True(t, readyAt.IsZero())
	require.True(t, b.Held())
	require.Equal(t, flow.Open, b.Force(flow.Closed, now.Add(time.Hour)))
	st, _ = b.State(now.Add(time.Hour))
	require.Equal(t, flow.Closed, st)
	require.False(t, b.Held())
}
