package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

func TestExplainNamesTheShortDimension(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) { c.Limits.OutputTokensPerMinute = 120 })
	require.Equal(t, dispatch.WaitReason{}, d.Explain().Waiting, "nothing queued")
	for range 3 {
		doAsync(context.Background(), d, request()) // 100 output tokens each: one fits at most
	}
	var x dispatch.Explain
	require.Eventually(t, func() bool {
		x = d.Explain()
		return dispatch.LoopIdle(d) && x.Waiting.Reason != ""
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, dispatch.WaitQuota, x.Waiting.Reason)
	require.Equal(t, "output_tokens", x.Waiting.Dimension)
	require.True(t, x.Waiting.Until.After(fc.Now()), "the bucket refills later")
	require.Equal(t, dispatch.Fingerprint("sk-upstream"), x.Waiting.Key)
	require.Equal(t, t0, x.OldestArrival[llm.Normal], "queued since the start (the clock has not moved)")
	require.True(t, x.OldestArrival[llm.High].IsZero())
	require.Eventually(t, func() bool { return d.Snapshot().InFlight == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, flow.Amount{}, d.Snapshot().Reserved, "the finished request's reservation is no longer in flight")
}

func TestExplainPausedAndLastRateLimit(t *testing.T) {
	t.Parallel()
	rate := reply{status: 429, header: map[string]string{"retry-after": "2"}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`}
	u := newUpstream(t, rate, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) { c.Retry.MaxAttempts = 3 })
	doAsync(context.Background(), d, request())
	var x dispatch.Explain
	require.Eventually(t, func() bool {
		x = d.Explain()
		return dispatch.LoopIdle(d) && x.Waiting.Reason != ""
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, dispatch.WaitPaused, x.Waiting.Reason)
	require.WithinRange(t, x.Waiting.Until, fc.Now().Add(2*time.Second), fc.Now().Add(2250*time.Millisecond), "the hint plus its jitter")
	require.Equal(t, 429, x.LastRateLimit.Status)
	require.Equal(t, "rate_limit_error", x.LastRateLimit.ErrorType)
	require.True(t, x.LastRateLimit.HasHint)
	require.Equal(t, 2*time.Second, x.LastRateLimit.Hint)
	require.True(t, x.LastOverload.At.IsZero())
}

func TestForceBreakerIsKeptInTheHistory(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, rec := start(t, u, nil)
	from, to, err := d.ForceBreaker(dispatch.BreakerOpen, "ops")
	require.NoError(t, err)
	require.Equal(t, flow.Closed, from)
	require.Equal(t, flow.Open, to)
	require.True(t, d.Explain().BreakerHeld)
	_, err = d.Do(context.Background(), request())
	require.ErrorIs(t, err, dispatch.ErrUnavailable, "held open: refused at once")
	_, _, err = d.ForceBreaker(dispatch.BreakerReset, "ops")
	require.NoError(t, err)
	_, _, err = d.ForceBreaker("explode", "ops")
	require.Error(t, err)
	h := d.Explain().BreakerHistory
	require.Len(t, h, 2)
	require.Equal(t, "operator open", h[0].Cause)
	require.Equal(t, flow.Open, h[1].From)
	require.Equal(t, "operator reset", h[1].Cause)
	rec.mu.Lock()
	require.Equal(t, []string{"closed>open", "open>closed"}, rec.breaker, "counted like any transition")
	rec.mu.Unlock()
	require.EqualValues(t, 0, u.calls.Load())
}
