package cluster_test

import (
	"strings"
	"testing"

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
