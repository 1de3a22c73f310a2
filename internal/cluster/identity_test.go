package cluster_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
)

// TestDefaultNodeIDIsUniquePerProcess: hostname-pid and a random suffix,
// drawn once per process (so WithDefaults stays idempotent).
func TestDefaultNodeIDIsUniquePerProcess(t *testing.T) {
	t.Parallel()
	a, b := cluster.Config{}.WithDefaults().NodeID, cluster.Config{}.WithDefaults().NodeID
	require.Equal(t, a, b, "one default per process")
	parts := strings.Split(a, "-")
	require.GreaterOrEqual(t, len(parts), 3, a)
	require.Len(t, parts[len(parts)-1], 6, "a 6 hex digit suffix: %s", a)
	require.Equal(t, "gw", cluster.Config{NodeID: "gw"}.WithDefaults().NodeID, "a configured id is kept")
}

// TestIncarnationOrder: the string round-trips, and the older is the
// earlier start, then the smaller token.
func TestIncarnationOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	for _, tc := range []struct {
		name  string
		a, b  cluster.Incarnation
		older bool
	}{
		{"earlier start", cluster.Incarnation{Token: "ff", Started: t0}, cluster.Incarnation{Token: "00", Started: t0.Add(time.Nanosecond)}, true},
		{"later start", cluster.Incarnation{Token: "00", Started: t0.Add(time.Second)}, cluster.Incarnation{Token: "ff", Started: t0}, false},
		{"same start, smaller token", cluster.Incarnation{Token: "0a", Started: t0}, cluster.Incarnation{Token: "0b", Started: t0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.older, tc.a.Older(tc.b))
			require.Equal(t, !tc.older, tc.b.Older(tc.a))
			back, err := cluster.ParseIncarnation(tc.a.String())
			require.NoError(t, err)
			require.True(t, back.Started.Equal(tc.a.Started))
			require.Equal(t, tc.a.Token, back.Token)
		})
	}
	_, err := cluster.ParseIncarnation("no-at-sign")
	require.ErrorIs(t, err, cluster.ErrBadIncarnation)
	inc := cluster.NewIncarnation(t0)
	require.Len(t, inc.Token, 8)
	require.NotContains(t, inc.String(), " ")
}
