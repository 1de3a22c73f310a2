package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admit"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// clusterNode is one gateway of an in-process cluster: a real Server
// (its client gates, spend ledger and cluster tenants) on a shared clock
// and a shared cluster.Memory, its engines fakes.
type clusterNode struct {
	srv *Server
}

// admitJob admits a job's call of client (in and out tokens) on upstream
// a at once, as the job worker does.
func (n *clusterNode) admitJob(client string, in, out int) (admit.Settler, error) {
	route, _ := n.srv.admit.RouteJobs("a", llm.Low, "", provider.Cost{})
	return n.srv.admit.AdmitNow(route.Target, tenantReq(client, in, out))
}

func newClusterNode(t *testing.T, clk *clock.Fake, mem cluster.Backend, id string, clients []clients.Config, st jobstore.Store) *clusterNode {
	t.Helper()
	cfg := Config{
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, BaseURL: "http://127.0.0.1:1", APIKey: upstreamKey}},
		Clients:   clients,
		// The tests sync by hand (clusterNode.sync), at fake instants of
		// their choosing: the loop's own interval never comes.
		Cluster: cluster.Config{NodeID: id, SyncInterval: time.Hour, LeaseTTL: 3 * time.Hour},
	}
	opts := []Option{withEngine("a", &fakeEngine{}), WithClock(clk), WithLogger(discardLogger())}
	if mem != nil {
		opts = append(opts, WithClusterBackend(mem))
	}
	if st != nil {
		opts = append(opts, WithSharedStore(st))
	}
	srv, err := New(cfg, opts...)
	require.NoError(t, err)
	if mem != nil {
		srv.mu.Lock()
		err = srv.startCluster(t.Context())
		srv.mu.Unlock()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, srv.stopCluster(context.Background())) })
	}
	if st != nil {
		require.NoError(t, srv.admit.Start(t.Context(), st))
		t.Cleanup(func() { require.NoError(t, srv.admit.Stop(context.Background())) })
	}
	return &clusterNode{srv: srv}
}

// sync runs one round of the tenants' syncs (the loop's step, also run by
// the loop itself on the clock).
func (n *clusterNode) sync(ctx context.Context) {
	if t := n.srv.admit.Tenants(); t != nil {
		t.SyncAll(ctx)
	}
}

func tenantReq(client string, in, out int) *dispatch.Request {
	return &dispatch.Request{Client: client, Priority: llm.Low,
		Cost: provider.Cost{Model: "claude-sonnet-4-5", InputTokens: int64(in), OutputTokens: int64(out)}}
}

// floodClientLimit floods client a's calls at the given nodes (five per
// node per 100 ms) for d, each node syncing every 500 ms (node i at
// offset 200·i ms), and returns the instants of the calls admitted (all
// nodes). It admits them at once (AdmitNow), through the client's one
// Gate on the upstream: the same gate a live request's dispatcher checks.
func floodClientLimit(t *testing.T, clk *clock.Fake, nodes []*clusterNode, flooded []bool, d time.Duration) []time.Time {
	t.Helper()
	var admitted []time.Time
	for step := time.Duration(0); step < d; step += 100 * time.Millisecond {
		for i, n := range nodes {
			if !flooded[i] {
				continue
			}
			for range 5 {
				h, err := n.admitJob("a", 10, 10)
				if err != nil {
					var held *admit.HeldError
					require.ErrorAs(t, err, &held)
					continue
				}
				admitted = append(admitted, clk.Now())
				h.Settle(dispatch.End{}, true)
			}
		}
		for i, n := range nodes {
			if (step+time.Duration(i)*200*time.Millisecond)%(500*time.Millisecond) == 0 {
				n.sync(t.Context())
			}
		}
		clk.Advance(100 * time.Millisecond)
	}
	return admitted
}

// maxInWindow is the most instants within any window of length w.
func maxInWindow(at []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// TestClusterClientLimitIsClusterWide: a client with requests_per_minute
// 60 flooding two nodes of one cluster gets at most 60 requests (plus one
// request per node: each node's bucket may hold its one-request cost)
// admitted in any minute window across both, and uses at least 90% of
// it; a node that alone serves the client gets nearly all of it; without
// the cluster the same flood gets about twice the limit (so the bound is
// the cluster's doing). Fake clock, real gates, real Tenants on one
// cluster.Memory.
func TestClusterClientLimitIsClusterWide(t *testing.T) {
	t.Parallel()
	clients := []clients.Config{{Name: "a", Key: "ck-a", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60, BurstSeconds: 1}}}}
	const limit, depth = 60, 1
	for _, tc := range []struct {
		name    string
		shared  bool
		flooded []bool
		check   func(t *testing.T, perMinute int)
	}{
		{"both nodes flood", true, []bool{true, true}, func(t *testing.T, perMinute int) {
			require.LessOrEqual(t, perMinute, limit+2*depth, "the cluster admits at most the client's limit plus a request per node")
			require.GreaterOrEqual(t, perMinute, limit*9/10, "and uses nearly all of it")
		}},
		{"one node alone", true, []bool{true, false}, func(t *testing.T, perMinute int) {
			require.LessOrEqual(t, perMinute, limit+2*depth)
			require.GreaterOrEqual(t, perMinute, limit*9/10, "a node alone gets nearly all of the client's limit")
		}},
		{"no cluster", false, []bool{true, true}, func(t *testing.T, perMinute int) {
			require.Greater(t, perMinute, limit+2*depth, "each node alone spends the whole limit")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			var mem cluster.Backend
			if tc.shared {
				mem = cluster.NewMemory(clk)
			}
			nodes := []*clusterNode{newClusterNode(t, clk, mem, "n1", clients, nil), newClusterNode(t, clk, mem, "n2", clients, nil)}
			admitted := floodClientLimit(t, clk, nodes, tc.flooded, 3*time.Minute)
			perMinute := maxInWindow(admitted, time.Minute)
			t.Logf("%s: %d admitted in 3 min, at most %d in a minute window (limit %d)", tc.name, len(admitted), perMinute, limit)
			tc.check(t, perMinute)
		})
	}
}

// TestClusterClientConcurrencyIsClusterWide: a client with
// max_concurrency 4 holding requests open on two nodes never has more
// than 4 in flight across both.
func TestClusterClientConcurrencyIsClusterWide(t *testing.T) {
	t.Parallel()
	clients := []clients.Config{{Name: "a", Key: "ck-a", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{MaxConcurrency: 4}}}}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := cluster.NewMemory(clk)
	nodes := []*clusterNode{newClusterNode(t, clk, mem, "n1", clients, nil), newClusterNode(t, clk, mem, "n2", clients, nil)}
	type held struct {
		h interface {
			Settle(dispatch.End, bool) float64
		}
		until time.Time
	}
	var open []held
	peak, total := 0, 0
	for step := range 600 { // 60 s
		now := clk.Now()
		kept := open[:0]
		for _, o := range open {
			if !o.until.After(now) {
				o.h.Settle(dispatch.End{}, true)
				continue
			}
			kept = append(kept, o)
		}
		open = kept
		for _, n := range nodes {
			for range 3 {
				h, err := n.admitJob("a", 10, 10)
				if err != nil {
					continue
				}
				total++
				open = append(open, held{h: h, until: now.Add(700 * time.Millisecond)})
			}
		}
		peak = max(peak, len(open))
		if step%5 == 0 {
			for _, n := range nodes {
				n.sync(t.Context())
			}
		}
		clk.Advance(100 * time.Millisecond)
	}
	t.Logf("peak in flight %d of max_concurrency 4, %d admitted in 60 s", peak, total)
	var slots int
	for _, n := range nodes {
		st := n.srv.admit.ClientLimits(clk.Now())
		require.Len(t, st, 1)
		require.NotNil(t, st[0].ClusterSlots, "/v1/status shows the node's slots of the client's limit")
		slots += *st[0].ClusterSlots
	}
	require.LessOrEqual(t, slots, 4)
	require.LessOrEqual(t, peak, 4)
	require.Greater(t, total, 4*60/2, "the slots are used (at least half of 4 per 0.7 s)")
}

// TestClusterBudgetNeverOvercommitted: two nodes sharing one store and
// one cluster, a client with a $1 total budget and concurrent expensive
// requests (worst case about $0.12 each, each held in flight for 1 s and
// settled at its worst case) arriving at both: the spend settled plus the
// reservations in flight across both nodes never exceed the budget,
// whatever the store's 5 s read-back lag, and most of it is spent;
// without the cluster the same load overspends.
func TestClusterBudgetNeverOvercommitted(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{true, false} {
		name := map[bool]string{true: "cluster", false: "no cluster"}[shared]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			st, err := jobstore.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "s.db"), jobstore.Options{Clock: clk})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			var mem cluster.Backend
			if shared {
				mem = cluster.NewMemory(clk)
			}
			clients := []clients.Config{{Name: "b", Key: "ck-b", Budget: admit.Budget{Total: 1}}}
			nodes := []*clusterNode{newClusterNode(t, clk, mem, "n1", clients, st), newClusterNode(t, clk, mem, "n2", clients, st)}
			type held struct {
				h     admit.Settler
				until time.Time
			}
			var open []held
			var settled, peak pricing.Amount
			success := dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}}
			for step := range 600 { // 60 s
				now := clk.Now()
				kept := open[:0]
				for _, o := range open {
					if !o.until.After(now) {
						settled += pricing.FromDollars(o.h.Settle(success, true))
						continue
					}
					kept = append(kept, o)
				}
				open = kept
				for _, n := range nodes {
					for range 2 {
						h, err := n.admitJob("b", 10_000, 6_000) // $0.03 + $0.09 worst case
						if err != nil {
							continue
						}
						open = append(open, held{h: h, until: now.Add(time.Second)})
					}
				}
				committed := settled
				for _, o := range open {
					committed += pricing.FromDollars(o.h.(*admit.Admission).Reserved())
				}
				peak = max(peak, committed)
				if step%5 == 0 {
					for _, n := range nodes {
						n.sync(t.Context())
					}
				}
				if step%50 == 0 {
					for _, n := range nodes {
						_ = n.srv.admit.Flush(t.Context())
					}
				}
				clk.Advance(100 * time.Millisecond)
			}
			t.Logf("%s: spent %s, peak committed (settled + in flight) %s of a $1 budget", name, settled, peak)
			ss := nodes[0].srv.admit.Spend(clk.Now())
			require.Len(t, ss.Clients, 1)
			require.Equal(t, shared, ss.Clients[0].ClusterShare != nil, "/v1/status shows the node's share of a shared budget")
			if shared {
				require.LessOrEqual(t, peak, pricing.FromDollars(1), "the cluster never commits more than the budget")
				require.GreaterOrEqual(t, settled, pricing.FromDollars(0.8), "and spends most of it")
			} else {
				require.Greater(t, peak, pricing.FromDollars(1), "each node alone overcommits")
			}
		})
	}
}

// TestClusterIdleClientLeavesAndComesBack: a client idle for
// cluster.TenantIdleAfter leaves the cluster's shared state on every node
// (no store round trip for it any more); when it floods again its nodes
// join again and share its limit as before.
func TestClusterIdleClientLeavesAndComesBack(t *testing.T) {
	t.Parallel()
	clients := []clients.Config{{Name: "a", Key: "ck-a", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60, BurstSeconds: 1}}}}
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := cluster.NewMemory(clk)
	nodes := []*clusterNode{newClusterNode(t, clk, mem, "n1", clients, nil), newClusterNode(t, clk, mem, "n2", clients, nil)}
	key := cluster.ClientKey("a", "a")
	floodClientLimit(t, clk, nodes, []bool{true, true}, time.Minute)
	for _, n := range nodes {
		require.True(t, n.srv.admit.Tenants().Has(key))
	}
	floodClientLimit(t, clk, nodes, []bool{false, false}, cluster.TenantIdleAfter+10*time.Second)
	for _, n := range nodes {
		require.False(t, n.srv.admit.Tenants().Has(key), "idle: left")
	}
	admitted := floodClientLimit(t, clk, nodes, []bool{true, true}, 2*time.Minute)
	for _, n := range nodes {
		require.True(t, n.srv.admit.Tenants().Has(key), "back: joined again")
	}
	perMinute := maxInWindow(admitted, time.Minute)
	t.Logf("back from idle: %d admitted in 2 min, at most %d in a minute window", len(admitted), perMinute)
	require.LessOrEqual(t, perMinute, 62)
	require.GreaterOrEqual(t, len(admitted), 2*54)
}
