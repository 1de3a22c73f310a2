package cluster_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// TestCriticalAtOneNodeWhileOthersFloodLow: three nodes (real
// dispatchers sharing a Memory backend, in front of the mock with one
// 3000 RPM quota and a 400 ms time to first token). Critical requests at
// node a, 4 a second, while b and c each hold a flood of low-priority
// requests far beyond the quota: their p95 latency stays within twice
// its value when the cluster is idle (outcome-based: the whole request,
// on the wall clock).
func TestCriticalAtOneNodeWhileOthersFloodLow(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: 3000}, BurstSeconds: 1, TTFT: 400 * time.Millisecond})
	require.NoError(t, err)
	up := httptest.NewServer(m.Handler())
	t.Cleanup(up.Close)
	ds := startClusterNodes(t, nil, cluster.NewMemory(nil), []string{up.URL, up.URL, up.URL}, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 3000
		c.Limits.MaxConcurrency = 64
		c.BurstSeconds = 1
		c.SafetyMargin = 1
	})
	critical := func() []time.Duration {
		// 40 requests, one every 250 ms, each on its own: 4/s whatever
		// their latency.
		out := make([]time.Duration, 40)
		errs := make([]error, 40)
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				errs[i] = do(ds[0], clusterRequest(time.Now().Add(time.Minute), llm.Critical))
				out[i] = time.Since(start)
			}()
			time.Sleep(250 * time.Millisecond)
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		return out
	}
	time.Sleep(500 * time.Millisecond) // the first grants
	idle := p95(critical())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var floodErr error
	for _, d := range ds[1:] {
		for range 600 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := doCtx(ctx, d, clusterRequest(time.Now().Add(time.Minute), llm.Low))
				if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
					mu.Lock()
					floodErr = err
					mu.Unlock()
				}
			}()
		}
	}
	time.Sleep(time.Second) // b and c hold the quota, with queues of their own
	admittedBefore := m.Stats().Overall.ByStatus["200"]
	floodStart := time.Now()
	require.Positive(t, ds[1].ClusterLoad().QueuedCount[llm.Low], "b is flooded")
	loaded := p95(critical())
	rate := float64(m.Stats().Overall.ByStatus["200"]-admittedBefore) / time.Since(floodStart).Seconds()
	require.Positive(t, ds[2].ClusterLoad().QueuedCount[llm.Low], "c is still flooded")
	cancel()
	wg.Wait()
	require.NoError(t, floodErr)
	st := m.Stats().Overall
	t.Logf("critical p95 at a: %v idle, %v while b and c flood low; the cluster sent %.1f/s of a 50/s quota meanwhile (mock: %v)",
		idle, loaded, rate, st.ByStatus)
	require.Greater(t, rate, 35.0, "the quota binds while a sends critical work")
	require.LessOrEqual(t, loaded, 2*idle)
	require.Zero(t, st.ByStatus["429"], "the cluster stays within the quota")
}
