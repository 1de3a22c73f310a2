package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExpiringRecord: the per-key record of prefixes forgets a name at
// its expiry, keeps the later of two expiries when asked, and drops the
// least recently used name past its bound.
func TestExpiringRecord(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	e := newExpiring[int64](2)
	e.put("a", 10, now.Add(time.Minute), true)
	v, ok := e.get("a", now)
	require.True(t, ok)
	require.EqualValues(t, 10, v)
	_, ok = e.get("a", now.Add(time.Minute))
	require.False(t, ok, "expired at its instant")
	require.Zero(t, e.len(), "an expired name is dropped when looked up")

	e.put("a", 1, now.Add(time.Hour), true)
	e.put("a", 2, now.Add(time.Minute), true)
	_, ok = e.get("a", now.Add(30*time.Minute))
	require.True(t, ok, "the later expiry is kept")
	e.put("a", 3, now.Add(time.Minute), false)
	_, ok = e.get("a", now.Add(30*time.Minute))
	require.False(t, ok, "replaced")

	e.put("x", 1, now.Add(time.Hour), true)
	e.put("y", 2, now.Add(time.Hour), true)
	_, _ = e.get("x", now) // x is now the most recently used
	e.put("z", 3, now.Add(time.Hour), true)
	require.Equal(t, 2, e.len(), "bounded")
	_, ok = e.get("y", now)
	require.False(t, ok, "the least recently used went first")
	_, ok = e.get("x", now)
	require.True(t, ok)
	e.remove("x")
	_, ok = e.get("x", now)
	require.False(t, ok)
}
