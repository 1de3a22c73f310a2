package membudget

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBodyBytes(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := NewBytes(1000, 2*time.Second, clk, prometheus.NewRegistry())
	ctx := t.Context()

	require.NoError(t, b.Take(ctx, 800, false))
	require.NoError(t, b.Take(ctx, 100, true), "a small request is never refused")
	require.NoError(t, b.Take(ctx, 100, false))
	require.EqualValues(t, 1000, b.InUse())

	// Full: a large request waits request_bytes_wait on the clock, then is refused.
	refused := make(chan error, 1)
	go func() { refused <- b.Take(ctx, 500, false) }()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	clk.Advance(2 * time.Second)
	require.ErrorIs(t, <-refused, ErrFull)
	require.EqualValues(t, 1, metricValue(t, b.refused))

	// Room made while it waits: it gets in.
	admitted := make(chan error, 1)
	go func() { admitted <- b.Take(ctx, 500, false) }()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	b.Release(800)
	require.NoError(t, <-admitted)
	require.EqualValues(t, 700, b.InUse())
	require.EqualValues(t, 700, metricValue(t, b.inFlight))

	// A client that leaves while waiting is not counted as refused.
	cctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- b.Take(cctx, 900, false) }()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	require.EqualValues(t, 1, metricValue(t, b.refused))

	// A body larger than the whole limit gets in alone.
	b.Release(700)
	require.NoError(t, b.Take(ctx, 5000, false))
	b.Release(5000)
	require.Zero(t, b.InUse())
	require.Zero(t, clk.Timers())
}

func TestMemoryFrom(t *testing.T) {
	t.Parallel()
	const meminfo = "MemTotal:       24684096 kB\nMemFree:         1000000 kB\n"
	for _, tc := range []struct {
		name            string
		cgroup, meminfo string
		want            int64
		ok              bool
	}{
		{name: "cgroup limit", cgroup: "2147483648\n", meminfo: meminfo, want: 2 << 30, ok: true},
		{name: "cgroup without limit", cgroup: "max\n", meminfo: meminfo, want: 24684096 * 1024, ok: true},
		{name: "cgroup above the machine", cgroup: "99999999999999\n", meminfo: meminfo, want: 24684096 * 1024, ok: true},
		{name: "no cgroup file", meminfo: meminfo, want: 24684096 * 1024, ok: true},
		{name: "cgroup only", cgroup: "1073741824", want: 1 << 30, ok: true},
		{name: "nothing", ok: false},
		{name: "broken meminfo", meminfo: "MemTotal: lots kB\n", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := memoryFrom(tc.cgroup, tc.meminfo)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestDefaultBudget(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, 200<<20, defaultRequestBytes(400<<20, 8<<30, true, 1<<30, 64<<10), "half of GOMEMLIMIT")
	require.EqualValues(t, 2<<30, defaultRequestBytes(math.MaxInt64, 8<<30, true, 1<<30, 64<<10), "a quarter of memory without GOMEMLIMIT")
	require.EqualValues(t, 1<<30, defaultRequestBytes(-1, 0, false, 1<<30, 64<<10), "unknown without a limit or the memory")
	require.EqualValues(t, 64<<10, defaultRequestBytes(1000, 0, false, 1<<30, 64<<10), "never below the floor")
}

// metricValue reads a gauge's or counter's value.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
