package opsview

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

var claude = upstream.Config{Name: "claude", Protocol: llm.Anthropic}

func TestHistorySampler(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	fc := clock.NewFake(t0.Add(-time.Second))
	v := New(Config{Upstreams: []upstream.Config{claude}, Clock: fc})
	e := &fakeEngine{snap: dispatch.Snapshot{InFlight: 2}}
	e.snap.Queued[llm.Low] = 3
	e.snap.Buckets[flow.Requests] = flow.BucketState{Capacity: 50, Depth: 50, Level: 12.34,
		Reported: flow.Observation{Limit: 60, Remaining: 7}, ReportedAt: t0}
	v.Bind(Sources{Engines: map[string]Engine{"claude": e}})
	// Traffic before the first sample is not in the rates that follow.
	obs := v.Observer("claude")
	for range 3 {
		obs.Attempted(llm.Success, 200, time.Millisecond)
		v.Answered(Answer{Upstream: "claude", Priority: "normal", Start: fc.Now(), Succeeded: true})
	}
	h := newHistorySampler(v, fc, time.Second, 3)
	h.sample(t0)
	lu := v.live.upstream("claude")
	lu.success.Add(4)
	lu.rate429.Add(2)
	lu.admitted.Add(6)
	lu.latency(llm.High, time.Second)
	lu.latency(llm.High, 3*time.Second)
	for i := range 3 {
		h.sample(t0.Add(time.Duration(i+1) * 2 * time.Second))
	}
	got := h.history()
	require.Len(t, got.Upstreams["claude"], 3, "the ring keeps the last 3")
	first := got.Upstreams["claude"][0]
	require.Equal(t, OutcomeRates{Admitted: 3, Success: 2, R429: 1}, first.Rates, "per second over the 2 s interval")
	seven, sixty := 7.0, 60.0
	require.Equal(t, map[string]BucketSample{"requests": {Available: 12.3, Depth: 50, ProviderRemaining: &seven, ProviderLimit: &sixty}},
		first.Buckets, "available against the depth, and the provider's view, rounded as in /v1/status")
	require.Equal(t, Quantiles{P50: 1, P95: 3, P99: 3, Count: 2}, first.Latency["high"])
	require.Equal(t, OutcomeRates{}, got.Upstreams["claude"][2].Rates)
	require.Equal(t, 3, first.Queued["low"], "the engine's queue per class")
	require.Equal(t, 2, first.InFlight)
}

// TestHistorySamplerLifecycle drives the sampler's own loop on a fake
// clock: Stop before Start is safe, Start samples at once and then every
// interval, Stop ends the loop and is idempotent.
func TestHistorySamplerLifecycle(t *testing.T) {
	t.Parallel()
	v := New(Config{Upstreams: []upstream.Config{claude}, Logger: discardLogger()})
	fc := clock.NewFake(time.Unix(1000, 0))
	h := newHistorySampler(v, fc, time.Second, 10)
	require.NoError(t, h.Stop(t.Context()), "safe before Start")

	h = newHistorySampler(v, fc, time.Second, 10)
	require.NoError(t, h.Start(t.Context()))
	require.Len(t, h.history().Upstreams["claude"], 1, "a first sample at once")
	for i := 2; i <= 4; i++ {
		require.True(t, fc.WaitForTimers(1, 5*time.Second))
		fc.Advance(time.Second)
		require.Eventually(t, func() bool { return len(h.history().Upstreams["claude"]) == i }, 5*time.Second, time.Millisecond)
	}
	require.NoError(t, h.Stop(t.Context()))
	require.NoError(t, h.Stop(t.Context()), "idempotent")
	require.ErrorIs(t, h.Start(t.Context()), lifecycle.ErrStopped, "no restart after Stop")
	fc.Advance(time.Minute)
	require.Len(t, h.history().Upstreams["claude"], 4)
	require.Equal(t, time.Unix(1003, 0).UTC(), h.history().Upstreams["claude"][3].Time)
}
