package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestObserveRaisesAFreshBucket: a fresh upstream starts at a guessed
// depth (5 s); the provider's first answer shows its bucket far deeper and
// fuller. The level rises to what the provider holds, less what was
// admitted since (and within the jitter allowance before) the request the
// answer is about. The old Observe only lowered the level and deepened
// the depth by doubling while the bucket was full: here it stayed at 200.
func TestObserveRaisesAFreshBucket(t *testing.T) {
	t.Parallel()
	// 60,000 output tokens a minute = 1,000/s; our depth 5 s = 5,000.
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.OutputTokens: 60000},
		BurstSeconds: 5, SafetyMargin: 1, JitterAllowance: 100 * time.Millisecond}, t0)
	require.NoError(t, err)
	cost := flow.Amount{flow.Requests: 1, flow.OutputTokens: 200}
	// The burst: 24 requests at t0 (4,800 of our 4,900 after the
	// allowance), each reported by the provider as it charges it.
	for range 24 {
		w, err := l.Reserve(cost, t0)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	mark := l.Mark(t0) // the first request's send, after all 24 were admitted
	require.InDelta(t, 100, l.State(t0)[flow.OutputTokens].Level, 1e-6)
	// The provider (10 s deep, 10,000) charged only this request when it
	// answered 300 ms later: 9,800 left. One more was admitted since the
	// mark (the refill made room for it): 200 left in our bucket.
	t1 := t0.Add(300 * time.Millisecond)
	w, err := l.Reserve(cost, t1)
	require.NoError(t, err)
	require.Zero(t, w)
	require.InDelta(t, 200, l.State(t1)[flow.OutputTokens].Level, 1e-6)
	l.Observe(map[flow.Dim]flow.Observation{flow.OutputTokens: {Limit: 60000, Remaining: 9800}}, mark, t1)
	s := l.State(t1)[flow.OutputTokens]
	require.InDelta(t, 9700, s.Depth, 1e-6, "as deep as the provider shows, less the jitter allowance")
	// R'' = min(9,800, depth 9,700) (no refill credited) − everything admitted
	// since t0 − 100 ms (all 25 requests: the other 23 of the burst may
	// reach the provider after this one) = 9,700 − 5,000 = 4,700.
	require.InDelta(t, 4700, s.Level, 1e-6)
	// A report without a Mark never raises.
	l2, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.OutputTokens: 60000},
		BurstSeconds: 5, SafetyMargin: 1, JitterAllowance: -1}, t0)
	require.NoError(t, err)
	_, err = l2.Reserve(flow.Amount{flow.OutputTokens: 4900}, t0)
	require.NoError(t, err)
	l2.Observe(map[flow.Dim]flow.Observation{flow.OutputTokens: {Limit: 60000, Remaining: 9000}}, flow.Mark{}, t0)
	require.InDelta(t, 100, l2.State(t0)[flow.OutputTokens].Level, 1e-6)
}

// TestAdaptiveMargin: the margin is MaxSafetyMargin while no 429 is seen,
// SafetyMargin right after one (Pause), and narrows back linearly over
// MarginRecovery. The old Limiter used SafetyMargin throughout.
func TestAdaptiveMargin(t *testing.T) {
	t.Parallel()
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.Requests: 6000},
		BurstSeconds: 10, SafetyMargin: 0.98, MaxSafetyMargin: 0.995, MarginRecovery: time.Minute}, t0)
	require.NoError(t, err)
	tests := []struct {
		name     string
		at       time.Duration
		pause    bool
		margin   float64
		capacity float64
	}{
		{"no 429 seen: narrow", 0, false, 0.995, 5970},
		{"still narrow", 30 * time.Second, false, 0.995, 5970},
		{"a 429: the configured margin", 40 * time.Second, true, 0.98, 5880},
		{"half way back", 70 * time.Second, false, 0.9875, 5925},
		{"back", 100 * time.Second, false, 0.995, 5970},
		{"never above the bound", time.Hour, false, 0.995, 5970},
	}
	for _, tt := range tests { // sequential: one Limiter through time
		now := t0.Add(tt.at)
		if tt.pause {
			l.Pause(now, now)
		}
		require.InDelta(t, tt.margin, l.Margin(now), 1e-9, tt.name)
		require.InDelta(t, tt.capacity, l.State(now)[flow.Requests].Capacity, 1e-6, tt.name)
	}
	// Fixed when MaxSafetyMargin is 0.
	f, err := flow.NewLimiter(flow.LimiterConfig{BurstSeconds: 10, SafetyMargin: 0.98}, t0)
	require.NoError(t, err)
	require.InDelta(t, 0.98, f.Margin(t0), 1e-12)
	_, err = flow.NewLimiter(flow.LimiterConfig{BurstSeconds: 10, SafetyMargin: 0.98, MaxSafetyMargin: 0.9}, t0)
	require.ErrorContains(t, err, "MaxSafetyMargin")
}

// TestHeadroomIsAShareOfTheConfiguredBurst: a class's headroom leaves a
// share of the configured burst unused, not of a depth learned from the
// provider: after deepening from 5 s to 10 s, a normal request (headroom
// 0.2) may drain the bucket down to 1 s of refill, not 2 s. (The old
// Limiter kept 0.2 of the learned depth, refill lost at the end of every
// drain.)
func TestHeadroomIsAShareOfTheConfiguredBurst(t *testing.T) {
	t.Parallel()
	// 60 RPM = 1/s: 5 s burst = 5 requests; the provider shows 10.
	l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 60}, 5)
	l.Observe(map[flow.Dim]flow.Observation{flow.Requests: {Limit: 60, Remaining: 10}}, flow.Mark{}, t0)
	require.InDelta(t, 10, l.State(t0)[flow.Requests].Depth, 1e-9)
	l.Refund(flow.Amount{flow.Requests: 10}, t0) // full at the new depth
	admitted := 0
	for range 12 {
		if w, err := l.ReserveKeeping(flow.Amount{flow.Requests: 1}, flow.Keep{Share: 0.2}, t0); err == nil && w == 0 {
			admitted++
		}
	}
	require.Equal(t, 9, admitted, "one request (0.2 x 5 s) kept for the urgent classes, not two")
}
