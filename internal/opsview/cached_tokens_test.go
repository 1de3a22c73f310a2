package opsview

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/upstream"
)

// TestCachedInputTokens: the input answers read from the provider's
// cache is reported per upstream (status and metric) and per client.
func TestCachedInputTokens(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Unix(1000, 0))
	v := New(Config{Clock: fc, Clients: []string{"web"}, Upstreams: []upstream.Config{claude}})
	for _, a := range []Answer{
		{Upstream: "claude", Client: "web", Priority: "normal", Succeeded: true, TokensIn: 10, TokensCached: 3000},
		{Upstream: "claude", Client: "web", Priority: "normal", Succeeded: true, TokensIn: 10, TokensCached: 1000},
		{Upstream: "claude", Client: "someone", Priority: "normal", Succeeded: true, TokensIn: 3000},
	} {
		v.Answered(a)
	}
	st := v.Status(t.Context())
	require.EqualValues(t, 4000, st.Upstreams[0].CachedInputTokens)
	byClient := map[string]int64{}
	for _, c := range st.Clients {
		byClient[c.Client] = c.TokensCached
	}
	require.Equal(t, map[string]int64{"web": 4000, "other": 0}, byClient)
	require.InDelta(t, 4000, testutil.ToFloat64(v.metrics.cached.WithLabelValues("claude", "web")), 0)
}
