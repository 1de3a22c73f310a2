package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// switchedBackend is a Backend that can be cut: while down every call
// fails at once, as a store refusing connections does.
type switchedBackend struct {
	*cluster.Memory
	down atomic.Bool
}

var errStoreCut = errors.New("store cut")

func (b *switchedBackend) Sync(ctx context.Context, r cluster.Report) (cluster.Grant, error) {
	if b.down.Load() {
		return cluster.Grant{}, errStoreCut
	}
	return b.Memory.Sync(ctx, r)
}

func (b *switchedBackend) Lead(ctx context.Context, name, node, inc string, ttl time.Duration) (bool, error) {
	if b.down.Load() {
		return false, errStoreCut
	}
	return b.Memory.Lead(ctx, name, node, inc, ttl)
}

func (b *switchedBackend) Leave(ctx context.Context, key, node, inc string) error {
	if b.down.Load() {
		return errStoreCut
	}
	return b.Memory.Leave(ctx, key, node, inc)
}

// longRequest is clusterRequest asking for 1000 output tokens.
func longRequest(deadline time.Time, class llm.Priority) *dispatch.Request {
	r := clusterRequest(deadline, class)
	r.Body = []byte(`{"model":"claude-test","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
	r.Cost.OutputTokens = 1000
	return r
}

// TestStoreReturnDoesNotStallLiveTraffic: three nodes (real dispatchers
// sharing a Memory backend that can be cut, in front of the mock with one
// 3000 RPM quota, max_concurrency 24, critical requests of 121 ms and low
// ones of 3.1 s), on one fake clock moved only
// while everything rests. Critical requests arrive at a and b, 4 a second
// each, while c holds a flood of low-priority requests. The store is cut
// for 5 s (every node falls back to 1/3 of the quota) and comes back:
// from its return on, no critical request at a or b waits longer than
// its idle latency plus 100 ms (the handover never leaves a
// node with less than its fallback share while the others have not
// lowered), the shares the nodes apply never sum above 1, and the
// provider never answers 429.
func TestStoreReturnDoesNotStallLiveTraffic(t *testing.T) {
	// Not parallel: clock.Settle reads the whole process's scheduler.
	const slack = 100 * time.Millisecond
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	// A critical request is short (8 tokens: 121 ms), a low one long
	// (1000 tokens: 3.1 s), as a batch job's often is.
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: 3000}, BurstSeconds: 1, TTFT: 100 * time.Millisecond,
		PerToken: 3 * time.Millisecond, OutputTokens: mock.OutputRange{Min: 1000}, Clock: fc})
	require.NoError(t, err)
	client := &http.Client{Transport: inProcess{m.Handler()}}
	const up = "http://mock.invalid"
	store := &switchedBackend{Memory: cluster.NewMemory(fc)}
	// The default sync interval and lease life, as in production.
	ds, ns := startClusterNodesWith(t, fc, store, []string{up, up, up}, []string{"a", "b", "c"}, cluster.Config{}, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 3000
		c.Limits.MaxConcurrency = 24
		c.BurstSeconds = 1
		c.SafetyMargin = 1
		c.HTTPClient = client
	})
	type sent struct {
		at   time.Time // when it arrived
		took time.Duration
		err  error
	}
	var mu sync.Mutex
	var crit []sent
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Critical at a and b, 4/s each, each on its own, until cancel.
	for _, d := range ds[:2] {
		wg.Go(func() {
			var each sync.WaitGroup
			defer each.Wait()
			for ctx.Err() == nil {
				at := fc.Now()
				each.Go(func() {
					err := do(d, clusterRequest(at.Add(time.Minute), llm.Critical))
					mu.Lock()
					crit = append(crit, sent{at: at, took: fc.Now().Sub(at), err: err})
					mu.Unlock()
				})
				if clock.Sleep(ctx, fc, 250*time.Millisecond) != nil {
					return
				}
			}
		})
	}
	// A flood of low work at c, far beyond the quota.
	var floodErr atomic.Value
	for range 600 {
		wg.Go(func() {
			err := doCtx(ctx, ds[2], longRequest(fc.Now().Add(10*time.Minute), llm.Low))
			if err != nil && ctx.Err() == nil {
				floodErr.Store(err)
			}
		})
	}
	// The least share and slots a and b applied from the store's return
	// on, and the most the three applied together, sampled at every rest.
	var back time.Time
	most := 0.0 // the most the three applied together
	least := [2]cluster.MemberStatus{{Share: 1, Slots: 1 << 30}, {Share: 1, Slots: 1 << 30}}
	until := func(d time.Duration) {
		t.Helper()
		end := fc.Now().Add(d)
		stepUntil(t, fc, func() bool {
			if !back.IsZero() {
				var sum float64
				for i, n := range ns {
					ms := n.Status().Members[0]
					sum += ms.Share
					if i < 2 {
						least[i].Share, least[i].Slots = min(least[i].Share, ms.Share), min(least[i].Slots, ms.Slots)
					}
				}
				most = max(most, sum)
			}
			return !fc.Now().Before(end)
		})
	}
	start := fc.Now()
	until(3 * time.Second) // shared: c holds most of the quota, a and b their urgent use
	store.down.Store(true)
	cut := fc.Now()
	until(5 * time.Second) // every node on its fallback
	store.down.Store(false)
	back = fc.Now()
	until(6 * time.Second) // the handover and after
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	stepUntil(t, fc, func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if err, _ := floodErr.Load().(error); err != nil {
		t.Fatalf("a low request failed: %v", err)
	}

	// idle: the worst critical latency before the cut; after: those that
	// arrived from the store's return on.
	var before []time.Duration
	for _, s := range crit {
		require.NoError(t, s.err)
		if s.at.Before(cut) && s.at.After(start.Add(time.Second)) {
			before = append(before, s.took)
		}
	}
	require.NotEmpty(t, before)
	idle := slices.Max(before)
	// The stall: from the store's return until the last critical request
	// that arrived since and waited more than idle+100 ms was answered.
	var worst, stall time.Duration
	for _, s := range crit {
		if s.at.Before(back) {
			continue
		}
		worst = max(worst, s.took)
		if s.took > idle+slack {
			stall = max(stall, s.at.Add(s.took).Sub(back))
		}
	}
	require.Positive(t, worst)
	st := m.Stats().Overall
	t.Logf("critical at a and b: worst %v before the cut, worst %v after the store's return (stalled %v after it); "+
		"least share and slots after it: a %.3f/%d, b %.3f/%d; the shares applied summed to at most %.3f; mock: %v",
		idle, worst, stall, least[0].Share, least[0].Slots, least[1].Share, least[1].Slots, most, st.ByStatus)
	require.Zero(t, st.ByStatus["429"], "the cluster stays within the quota")
	require.LessOrEqual(t, most, 1+1e-9, "the shares applied never sum above the quota")
	require.LessOrEqual(t, worst, idle+slack, "no critical request after the store's return waits more than idle + 100 ms")
}

// TestTenantsHandOverAfterTheFallback: two nodes share a client's limit;
// the store is cut past the leases' life (each falls back to 1/2) and
// comes back. The first node to sync again does not take the whole limit
// while the other still applies its half, and the other does not drop to
// nothing: both keep their half for a lease's life (the shares applied
// never sum above 1), then the grants follow demand.
func TestTenantsHandOverAfterTheFallback(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	store := &switchedBackend{Memory: cluster.NewMemory(fc)}
	cfg := cluster.Config{SyncInterval: 100 * time.Millisecond, LeaseTTL: time.Second}
	key := tenantKey(t)
	var ts [2]*cluster.Tenants
	var ft [2]*fakeTenant
	for i, node := range []string{"n1", "n2"} {
		cfg.NodeID = node
		var err error
		ts[i], err = cluster.NewTenants(cfg, nil, store, fc, nil)
		require.NoError(t, err)
		ft[i] = &fakeTenant{key: key, demand: []float64{0.1, 2}[i], maxSlot: 8}
		ts[i].Join(ctx, ft[i])
	}
	syncBoth := func(order ...int) (sum float64) {
		for _, i := range order {
			ts[i].SyncAll(ctx)
		}
		for _, f := range ft {
			sum += f.got().Share
		}
		return sum
	}
	for range 3 {
		fc.Advance(100 * time.Millisecond)
		require.LessOrEqual(t, syncBoth(0, 1), 1+1e-9)
	}
	require.Less(t, ft[0].got().Share, 0.5, "n1 asks little")

	store.down.Store(true)
	fc.Advance(2 * time.Second)
	syncBoth(0, 1)
	for _, f := range ft {
		require.True(t, f.got().Fallback)
		require.InDelta(t, 0.5, f.got().Share, 1e-9, "1/N on the fallback")
	}

	store.down.Store(false)
	fc.Advance(100 * time.Millisecond)
	// n2 (the bigger demand) syncs first, then n1, for a lease's life.
	for range 9 {
		require.LessOrEqual(t, syncBoth(1, 0), 1+1e-9, "the shares applied never sum above 1")
		for i, f := range ft {
			require.InDelta(t, 0.5, f.got().Share, 1e-9, "node %d keeps its fallback share in the handover", i)
		}
		fc.Advance(100 * time.Millisecond)
	}
	fc.Advance(200 * time.Millisecond)
	for range 3 {
		require.LessOrEqual(t, syncBoth(1, 0), 1+1e-9, "the shares applied never sum above 1")
		fc.Advance(100 * time.Millisecond)
	}
	require.Less(t, ft[0].got().Share, 0.5, "after the handover, the grants follow demand")
	require.Greater(t, ft[1].got().Share, 0.5)
	require.False(t, ft[1].got().Fallback)
}
