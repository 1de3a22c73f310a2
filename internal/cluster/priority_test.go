package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// p95 of ds.
func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*95+99)/100-1]
}

// inProcess serves requests with h in the caller's goroutine, without a
// network: every goroutine of a rig is then running or blocked where the
// runtime sees it (clock.Settle).
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// stepUntil moves fc from rest to rest (clock.Fake.StepUntil) until done
// holds.
func stepUntil(t *testing.T, fc *clock.Fake, done func() bool) {
	t.Helper()
	require.NoError(t, fc.StepUntil(done, time.Minute))
}

// TestCriticalAtOneNodeWhileOthersFloodLow: three nodes (real
// dispatchers sharing a Memory backend, in front of the mock with one
// 3000 RPM quota and a 100 ms or 400 ms time to first token), all on one
// fake clock moved only while everything rests. Critical requests at
// node a, 4 a second, while b and c each hold a flood of low-priority
// requests far beyond the quota: their p95 latency stays within 1.5× its
// value when the cluster is idle (the whole request, on the fake clock;
// a's share keeps room for its urgent use, cluster.UrgentHeadroom), while
// the cluster keeps the quota busy and never exceeds it.
func TestCriticalAtOneNodeWhileOthersFloodLow(t *testing.T) {
	// Not parallel: clock.Settle reads the whole process's scheduler.
	for _, ttft := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(ttft.String(), func(t *testing.T) { criticalWhileOthersFloodLow(t, ttft) })
	}
}

// criticalWhileOthersFloodLow is the test with the mock's first-token
// time ttft.
func criticalWhileOthersFloodLow(t *testing.T, ttft time.Duration) {
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: 3000}, BurstSeconds: 1, TTFT: ttft, Clock: fc})
	require.NoError(t, err)
	client := &http.Client{Transport: inProcess{m.Handler()}}
	const up = "http://mock.invalid"
	ds := startClusterNodes(t, fc, cluster.NewMemory(fc), []string{up, up, up}, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 3000
		c.Limits.MaxConcurrency = 64
		c.BurstSeconds = 1
		c.SafetyMargin = 1
		c.HTTPClient = client
	})
	// critical sends 40 requests at a, one every 250 ms of the clock, each
	// on its own (4/s whatever their latency), and returns their latencies.
	critical := func() []time.Duration {
		out := make([]time.Duration, 40)
		errs := make([]error, 40)
		var wg sync.WaitGroup
		start := fc.Now()
		for i := range out {
			wg.Go(func() {
				at := start.Add(time.Duration(i) * 250 * time.Millisecond)
				if err := clock.Sleep(context.Background(), fc, at.Sub(fc.Now())); err != nil {
					errs[i] = err
					return
				}
				errs[i] = do(ds[0], clusterRequest(fc.Now().Add(time.Minute), llm.Critical))
				out[i] = fc.Now().Sub(at)
			})
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		stepUntil(t, fc, func() bool {
			select {
			case <-finished:
				return true
			default:
				return false
			}
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
		return out
	}
	grants := fc.Now().Add(500 * time.Millisecond)
	stepUntil(t, fc, func() bool { return !fc.Now().Before(grants) }) // the first grants
	idle := p95(critical())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var floodErr error
	for _, d := range ds[1:] {
		for range 600 {
			wg.Go(func() {
				err := doCtx(ctx, d, clusterRequest(fc.Now().Add(time.Minute), llm.Low))
				if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
					mu.Lock()
					floodErr = err
					mu.Unlock()
				}
			})
		}
	}
	held := fc.Now().Add(time.Second)
	stepUntil(t, fc, func() bool { return !fc.Now().Before(held) }) // b and c hold the quota, with queues of their own
	admittedBefore := m.Stats().Overall.ByStatus["200"]
	floodStart := fc.Now()
	require.Positive(t, ds[1].ClusterLoad().QueuedCount[llm.Low], "b is flooded")
	loaded := p95(critical())
	rate := float64(m.Stats().Overall.ByStatus["200"]-admittedBefore) / fc.Now().Sub(floodStart).Seconds()
	require.Positive(t, ds[2].ClusterLoad().QueuedCount[llm.Low], "c is still flooded")
	cancel()
	flooded := make(chan struct{})
	go func() { wg.Wait(); close(flooded) }()
	stepUntil(t, fc, func() bool {
		select {
		case <-flooded:
			return true
		default:
			return false
		}
	})
	require.NoError(t, floodErr)
	st := m.Stats().Overall
	t.Logf("critical p95 at a: %v idle, %v while b and c flood low; the cluster sent %.1f/s of a 50/s quota meanwhile (mock: %v)",
		idle, loaded, rate, st.ByStatus)
	require.Greater(t, rate, 35.0, "the quota binds while a sends critical work")
	require.LessOrEqual(t, loaded.Seconds(), 1.5*idle.Seconds(), "critical p95 within 1.5x idle")
	require.Zero(t, st.ByStatus["429"], "the cluster stays within the quota")
}
