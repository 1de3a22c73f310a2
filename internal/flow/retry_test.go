package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

func TestRetryBudget(t *testing.T) {
	t.Parallel()
	b, err := flow.NewRetryBudget(0.2, 0.5, 10*time.Second) // floor: 5 per 10 s
	require.NoError(t, err)
	allowed := 0
	for range 10 {
		if b.TryRetry(t0) {
			allowed++
		}
	}
	require.Equal(t, 5, allowed, "the floor")

	for range 100 {
		b.RecordRequest(t0)
	}
	allowed = 0
	for range 100 {
		if b.TryRetry(t0) {
			allowed++
		}
	}
	require.Equal(t, 15, allowed, "20%% of 100 requests, 5 already spent")

	later := t0.Add(10 * time.Second)
	require.True(t, b.TryRetry(later), "the window has moved on")
	_, err = flow.NewRetryBudget(-1, 0, 0)
	require.ErrorContains(t, err, "BudgetRatio")
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := flow.Backoff{Base: 500 * time.Millisecond, Max: 8 * time.Second}.WithDefaults()
	require.NoError(t, b.Validate())
	tests := []struct {
		retry int
		ceil  time.Duration
	}{
		{0, 500 * time.Millisecond}, {1, time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {60, 8 * time.Second}, {5000, 8 * time.Second},
	}
	for _, tt := range tests {
		require.Equal(t, tt.ceil, b.Ceiling(tt.retry))
		require.Zero(t, b.Delay(tt.retry, 0))
		require.Equal(t, tt.ceil/2, b.Delay(tt.retry, 0.5))
		require.LessOrEqual(t, b.Delay(tt.retry, 0.9999), tt.ceil)
	}
	require.Equal(t, 2*time.Second, b.RateDelay(2*time.Second, 0), "never less than the hint")
	require.Equal(t, 2*time.Second+125*time.Millisecond, b.RateDelay(2*time.Second, 0.5))
	require.Error(t, flow.Backoff{Base: time.Second, Max: time.Millisecond}.Validate())
}

func TestAIMD(t *testing.T) {
	t.Parallel()
	a, err := flow.NewAIMD(2, 10, 0.5)
	require.NoError(t, err)
	require.Equal(t, 10, a.Limit())
	a.OnOverload()
	require.Equal(t, 5, a.Limit())
	a.OnOverload()
	a.OnOverload()
	require.Equal(t, 2, a.Limit(), "never below the floor")
	a.OnSuccess(0)
	require.Equal(t, 2, a.Limit(), "no increase when under-utilised")
	a.OnSuccess(1)
	require.Equal(t, 3, a.Limit(), "+1 when at least half the limit is in flight")
	for range 20 {
		a.OnSuccess(10)
	}
	require.Equal(t, 10, a.Limit(), "never above the cap")
	_, err = flow.NewAIMD(5, 2, 0)
	require.ErrorContains(t, err, "MaxConcurrency")
}
