package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// fakeTenant reports a set demand and records its grants.
type fakeTenant struct {
	key string

	mu      sync.Mutex
	idle    bool
	demand  float64
	using   float64
	maxSlot int
	grant   cluster.TenantGrant
}

func (f *fakeTenant) Key() string { return f.key }

func (f *fakeTenant) Load(time.Time) cluster.TenantLoad {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cluster.TenantLoad{Demand: f.demand, Using: f.using, SlotDemand: f.demand, MaxSlots: f.maxSlot, Idle: f.idle}
}

func (f *fakeTenant) Apply(g cluster.TenantGrant) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grant = g
}

func (f *fakeTenant) got() cluster.TenantGrant {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grant
}

func (f *fakeTenant) set(demand, using float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.demand, f.using = demand, using
}

func tenantKey(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return cluster.ClientKey("c-"+hex.EncodeToString(b[:]), "up")
}

func newTenants(t *testing.T, b cluster.Backend, node string) *cluster.Tenants {
	t.Helper()
	ts, err := cluster.NewTenants(cluster.Config{NodeID: node, SyncInterval: time.Hour, LeaseTTL: 3 * time.Hour}, nil, b, nil, nil)
	require.NoError(t, err)
	return ts
}

// runTenantCases runs the Tenants cases on the backend open returns.
func runTenantCases(t *testing.T, open func(t *testing.T) cluster.Backend) {
	t.Run("LoneNodeGetsAll", func(t *testing.T) {
		t.Parallel()
		ts := newTenants(t, open(t), "n1")
		ft := &fakeTenant{key: tenantKey(t), demand: 1, maxSlot: 4}
		ts.Join(t.Context(), ft)
		require.InDelta(t, 1, ft.got().Share, 1e-9, "a node alone serving a client gets all of its limit")
		require.Equal(t, 4, ft.got().Slots)
		require.Equal(t, 1, ft.got().Nodes)
	})
	t.Run("SplitByDemandNeverAboveOne", func(t *testing.T) {
		t.Parallel()
		b := open(t)
		key := tenantKey(t)
		a, c := newTenants(t, b, "a"), newTenants(t, b, "c")
		fa, fc := &fakeTenant{key: key, demand: 3, maxSlot: 8}, &fakeTenant{key: key, demand: 1, maxSlot: 8}
		a.Join(t.Context(), fa)
		c.Join(t.Context(), fc)
		for range 4 {
			a.SyncAll(t.Context())
			c.SyncAll(t.Context())
			require.LessOrEqual(t, fa.got().Share+fc.got().Share, 1+1e-9)
			require.LessOrEqual(t, fa.got().Slots+fc.got().Slots, 8)
		}
		require.InDelta(t, 0.05+0.9*0.75, fa.got().Share, 0.02, "the floor plus the rest by demand")
		require.InDelta(t, 0.05+0.9*0.25, fc.got().Share, 0.02)
		// A leaves: C takes the whole limit at its next syncs.
		require.NoError(t, a.Stop(t.Context()))
		require.NoError(t, b.Leave(t.Context(), key, "a", a.Identity().Incarnation().String())) // Stop before Start leaves nothing
		c.SyncAll(t.Context())
		c.SyncAll(t.Context())
		require.InDelta(t, 1, fc.got().Share, 1e-9)
	})
	t.Run("UsingIsHeld", func(t *testing.T) {
		t.Parallel()
		b := open(t)
		key := cluster.BudgetKey(tenantKey(t))
		a, c := newTenants(t, b, "a"), newTenants(t, b, "c")
		fa := &fakeTenant{key: key, demand: 1}
		a.Join(t.Context(), fa)
		require.InDelta(t, 1, fa.got().Share, 1e-9)
		// A commits 80% of the remainder, then its demand drops: its
		// grant falls, but its lease keeps what it uses.
		fa.set(0, 0.8)
		fc := &fakeTenant{key: key, demand: 1}
		c.Join(t.Context(), fc)
		for range 3 {
			a.SyncAll(t.Context())
			c.SyncAll(t.Context())
		}
		require.LessOrEqual(t, fc.got().Share, 0.2+1e-9, "C is never granted what A still uses")
		fa.set(0, 0)
		for range 3 {
			a.SyncAll(t.Context())
			c.SyncAll(t.Context())
		}
		require.Greater(t, fc.got().Share, 0.9, "once A uses nothing, C gets the rest")
	})
	t.Run("StartStop", func(t *testing.T) {
		t.Parallel()
		b := open(t)
		ts := newTenants(t, b, "n1")
		require.NoError(t, ts.Stop(t.Context()), "Stop before Start")
		require.ErrorIs(t, ts.Start(t.Context()), lifecycle.ErrStopped, "and it never starts")
		ts = newTenants(t, b, "n1")
		require.NoError(t, ts.Start(t.Context()))
		ts.Join(t.Context(), &fakeTenant{key: tenantKey(t), demand: 1})
		require.NoError(t, ts.Stop(t.Context()))
		require.NoError(t, ts.Stop(t.Context()), "Stop is idempotent")
	})
}

// failing is a Backend whose Sync fails.
type failing struct{ cluster.Backend }

func (failing) Sync(context.Context, cluster.Report) (cluster.Grant, error) {
	return cluster.Grant{}, errors.New("store down")
}

func TestTenantsMemory(t *testing.T) {
	t.Parallel()
	runTenantCases(t, func(*testing.T) cluster.Backend { return cluster.NewMemory(nil) })
}

func TestTenantsPostgres(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	runTenantCases(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenPostgres(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}

func TestTenantsRedis(t *testing.T) {
	t.Parallel()
	url := redisURL(t)
	runTenantCases(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenRedis(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}

// TestTenantsFallBack: a tenant whose store cannot be reached falls back
// to 1/N of the limit (N the node count last seen) and a slot share.
func TestTenantsFallBack(t *testing.T) {
	t.Parallel()
	ts := newTenants(t, failing{cluster.NewMemory(nil)}, "n1")
	ft := &fakeTenant{key: tenantKey(t), demand: 1, maxSlot: 6}
	ts.Join(t.Context(), ft)
	g := ft.got()
	require.True(t, g.Fallback)
	require.InDelta(t, 1, g.Share, 1e-9, "no other node seen: the whole limit")
	require.Equal(t, 6, g.Slots)
	st, err := ts.Status()
	require.Error(t, err)
	require.Len(t, st, 1)
	require.True(t, st[0].Fallback)
}

// TestTenantsIdleLeaves: a tenant idle for TenantIdleAfter applies a zero
// share, gives its lease back (the other node gets the whole limit) and
// is forgotten; joined again, it is granted a share at once.
func TestTenantsIdleLeaves(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := cluster.NewMemory(clk)
	cfg := cluster.Config{SyncInterval: time.Hour, LeaseTTL: 3 * time.Hour}
	cfg.NodeID = "a"
	a, err := cluster.NewTenants(cfg, nil, b, clk, nil)
	require.NoError(t, err)
	cfg.NodeID = "c"
	c, err := cluster.NewTenants(cfg, nil, b, clk, nil)
	require.NoError(t, err)
	key := tenantKey(t)
	fa, fc := &fakeTenant{key: key, demand: 1}, &fakeTenant{key: key, demand: 1}
	a.Join(t.Context(), fa)
	c.Join(t.Context(), fc)
	fa.mu.Lock()
	fa.idle, fa.demand = true, 0
	fa.mu.Unlock()
	for range 5 {
		a.SyncAll(t.Context())
		c.SyncAll(t.Context())
		clk.Advance(time.Minute)
	}
	require.False(t, a.Has(key), "idle for 2 minutes: left")
	require.Zero(t, fa.got().Share)
	require.InDelta(t, 1, fc.got().Share, 1e-9, "its lease is gone: the other node has it all")
	fa.mu.Lock()
	fa.idle, fa.demand = false, 1
	fa.mu.Unlock()
	a.Join(t.Context(), fa)
	require.True(t, a.Has(key))
	require.Zero(t, fa.got().Share, "joined again at its next use, nothing free until the other lowers")
	c.SyncAll(t.Context()) // lowers
	c.SyncAll(t.Context()) // reports the lower share: the rest is free
	a.SyncAll(t.Context())
	require.Greater(t, fa.got().Share, 0.4, "shared again within two syncs of the other")
	require.LessOrEqual(t, fa.got().Share+fc.got().Share, 1+1e-9)
}
