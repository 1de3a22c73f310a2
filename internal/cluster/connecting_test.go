package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/storelink"
)

// TestNodeStartsWithoutItsStore: a node whose shared store cannot be
// opened starts at once on 1/expected_nodes of each quota (its slots
// likewise) and reports itself degraded; a client's limit falls back the
// same way. Once the store opens, the grant applies and the link says
// connected; a store lost later is reported lost.
func TestNodeStartsWithoutItsStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &flakyBackend{}
	var mu sync.Mutex
	reachable := false
	var seen []bool
	c, err := cluster.NewConnectingWith(func(context.Context) (cluster.Backend, error) {
		mu.Lock()
		defer mu.Unlock()
		if !reachable {
			return nil, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}
		return b, nil
	}, storelink.Config{BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Observer: func(name string, up bool) {
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, "cluster", name)
			seen = append(seen, up)
		}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	defer func() { require.NoError(t, c.Close()) }()
	cfg := cluster.Config{NodeID: "me", SyncInterval: 10 * time.Millisecond, LeaseTTL: 40 * time.Millisecond, ExpectedNodes: 4}
	m := &stubMember{key: cluster.Key("u", "k"), queued: 5}
	n, err := cluster.NewNode(cfg, c, []cluster.Member{m}, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	defer func() { require.NoError(t, n.Stop(ctx)) }()
	share, slots, _ := m.get()
	require.InDelta(t, 0.25, share, 1e-9, "1/expected_nodes before the store ever answered")
	require.Equal(t, 3, slots, "12 slots / 4")
	require.True(t, n.Status().Degraded)
	st, _, _ := c.State()
	require.Equal(t, storelink.Connecting, st)

	tn, err := cluster.NewTenants(cfg, n.Identity(), c, nil, nil)
	require.NoError(t, err)
	require.NoError(t, tn.Start(ctx))
	defer func() { require.NoError(t, tn.Stop(ctx)) }()
	ten := &fakeTenant{key: cluster.ClientKey("web", "u"), demand: 1}
	tn.Join(ctx, ten)
	g := ten.got()
	require.True(t, g.Fallback)
	require.InDelta(t, 0.25, g.Share, 1e-9, "a client's limit: 1/expected_nodes too")

	mu.Lock()
	reachable = true
	mu.Unlock()
	require.Eventually(t, func() bool { return !n.Status().Degraded }, 5*time.Second, 5*time.Millisecond)
	// A node back from its fallback keeps that share for one lease (the
	// handover), then applies the store's grant.
	require.Eventually(t, func() bool { share, _, _ := m.get(); return share > 0.5-1e-9 && share < 0.5+1e-9 },
		5*time.Second, 5*time.Millisecond, "the store's grant after the handover")
	require.Eventually(t, func() bool { return !ten.got().Fallback }, 5*time.Second, 5*time.Millisecond)
	st, _, _ = c.State()
	require.Equal(t, storelink.Connected, st)

	b.setDown(true)
	require.Eventually(t, func() bool { st, _, _ := c.State(); return st == storelink.Lost }, 5*time.Second, 5*time.Millisecond)
	b.setDown(false)
	require.Eventually(t, func() bool { st, _, _ := c.State(); return st == storelink.Connected }, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{false, true, false, true}, seen)
}
