package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestResponseKeysBounded: a response's key is remembered for
// its ttl after its creation and at most ResponseKeysMax are kept,
// the oldest forgotten first; a response recorded again keeps its latest
// key and time.
func TestResponseKeysBounded(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a, b := &poolKey{}, &poolKey{}
	const ttl = 24 * time.Hour
	r := responseKeys{ttl: ttl}
	r.put("resp_1", a, t0)
	r.put("resp_2", b, t0.Add(time.Hour))
	k, ok := r.get("resp_1", t0.Add(ttl-time.Second))
	require.True(t, ok)
	require.Same(t, a, k)
	_, ok = r.get("resp_1", t0.Add(ttl))
	require.False(t, ok, "expired")
	_, ok = r.get("resp_unknown", t0)
	require.False(t, ok)

	// A put after the TTL drops the expired entries.
	r.put("resp_3", a, t0.Add(ttl))
	require.Equal(t, 2, r.len())
	r.put("resp_2", a, t0.Add(ttl+time.Minute)) // recorded again: the latest wins
	k, ok = r.get("resp_2", t0.Add(2*ttl))
	require.True(t, ok)
	require.Same(t, a, k)
	r.put("resp_4", a, t0.Add(ttl+2*time.Hour)) // resp_2's first entry expires: its replacement stays
	_, ok = r.get("resp_2", t0.Add(ttl+2*time.Hour))
	require.True(t, ok)

	// The count bound.
	big := responseKeys{ttl: ttl}
	for i := range ResponseKeysMax + 10 {
		big.put(fmt.Sprintf("resp_%d", i), a, t0.Add(time.Duration(i)*time.Millisecond))
	}
	require.Equal(t, ResponseKeysMax, big.len())
	_, ok = big.get("resp_9", t0.Add(time.Hour))
	require.False(t, ok, "the oldest are forgotten first")
	_, ok = big.get(fmt.Sprintf("resp_%d", ResponseKeysMax+9), t0.Add(time.Hour))
	require.True(t, ok)
	require.LessOrEqual(t, len(big.order)-big.head, ResponseKeysMax+64)
}
