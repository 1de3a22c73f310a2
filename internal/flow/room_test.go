package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestRoomAgreesWithTimeUntil: Room's wait is TimeUntil's (keep 0), and
// the room it reports is what a Reserve leaves.
func TestRoomAgreesWithTimeUntil(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.Requests: 60, flow.Tokens: 6000}, BurstSeconds: 10, SafetyMargin: 1}, now)
	require.NoError(t, err)
	for i := range 15 {
		cost := flow.NewAmount(int64(100*i), 50)
		want, err1 := l.TimeUntil(cost, now)
		got, room, err2 := l.Room(cost, flow.Keep{}, now)
		require.Equal(t, err1 != nil, err2 != nil)
		require.Equal(t, want, got, "cost %v", cost)
		if got == 0 {
			lvl := l.State(now)[flow.Requests].Level
			require.LessOrEqual(t, room, (lvl-1)/60+1e-9)
			_, err := l.Reserve(cost, now)
			require.NoError(t, err)
		}
		now = now.Add(300 * time.Millisecond)
	}
	_, _, err = l.Room(flow.NewAmount(7000, 0), flow.Keep{}, now)
	require.ErrorIs(t, err, flow.ErrTooLarge)
	l.Pause(now.Add(time.Second), now)
	w, _, err := l.Room(flow.NewAmount(1, 1), flow.Keep{}, now)
	require.NoError(t, err)
	require.Equal(t, time.Second, w)
}
