// Package clustertest is the conformance suite every cluster.Backend
// passes: the same cases run against PostgreSQL and Redis.
package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
)

// Open returns a fresh Backend for one test (closed by the caller's
// cleanup).
type Open func(t *testing.T) cluster.Backend

func uniqueKey(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "test-" + hex.EncodeToString(b[:]) + "/" + cluster.Fingerprint("k")
}

// report is node's report, from one process per node name (incOf).
func report(key, node string, share, demand float64) cluster.Report {
	return cluster.Report{Key: key, Node: node, Incarnation: incOf(node), Share: share, Demand: demand, SlotDemand: demand,
		MaxSlots: 12, TTL: time.Minute}
}

// incOf is the incarnation of the one process the cases run as node.
func incOf(node string) string { return "inc-" + node }

// Run runs every conformance case.
func Run(t *testing.T, open Open) {
	t.Run("LoneNodeGetsAll", func(t *testing.T) { t.Parallel(); loneNode(t, open(t)) })
	t.Run("BadReport", func(t *testing.T) { t.Parallel(); badReport(t, open(t)) })
	t.Run("SharesNeverSumAboveOne", func(t *testing.T) { t.Parallel(); neverAboveOne(t, open(t)) })
	t.Run("LowerFirstThenRelease", func(t *testing.T) { t.Parallel(); lowerFirst(t, open(t)) })
	t.Run("ConcurrentSyncs", func(t *testing.T) { t.Parallel(); concurrent(t, open(t)) })
	t.Run("ExpiryReturnsShare", func(t *testing.T) { t.Parallel(); expiry(t, open(t)) })
	t.Run("Leave", func(t *testing.T) { t.Parallel(); leave(t, open(t)) })
	t.Run("PauseLatestWins", func(t *testing.T) { t.Parallel(); pause(t, open(t)) })
	t.Run("Leadership", func(t *testing.T) { t.Parallel(); leadership(t, open(t)) })
	t.Run("DuplicateNodeDetected", func(t *testing.T) { t.Parallel(); duplicateNode(t, open(t)) })
	t.Run("RestartTakesOverItsPredecessor", func(t *testing.T) { t.Parallel(); restartTakeover(t, open(t)) })
	t.Run("BreakerOpensForAll", func(t *testing.T) { t.Parallel(); breakerOpens(t, open(t)) })
	t.Run("OneProbeTokenClusterWide", func(t *testing.T) { t.Parallel(); probeToken(t, open(t)) })
	t.Run("ProbeTokenExpires", func(t *testing.T) { t.Parallel(); probeExpiry(t, open(t)) })
	t.Run("IdleHolderGivesTokenBack", func(t *testing.T) { t.Parallel(); probeRelease(t, open(t)) })
	runLearned(t, open)
	t.Run("BurstPoolFreshStart", func(t *testing.T) { t.Parallel(); burstFresh(t, open(t)) })
	t.Run("BurstCreditsNeverAbovePool", func(t *testing.T) { t.Parallel(); burstConcurrent(t, open(t)) })
	t.Run("BurstPoolDecays", func(t *testing.T) { t.Parallel(); burstDecay(t, open(t)) })
	t.Run("BurstDropsComeBack", func(t *testing.T) { t.Parallel(); burstReturned(t, open(t)) })
	t.Run("BurstPoolAfterEveryLeaseExpired", func(t *testing.T) { t.Parallel(); burstAfterExpiry(t, open(t)) })
}

// burstReport is a report for the burst pool's cases: a burst refilled in
// an hour, so the pool's decay is negligible unless a case asks for it.
func burstReport(key, node string, share, backlog float64, starting bool) cluster.Report {
	r := report(key, node, share, 1)
	r.Starting, r.Backlog, r.BurstSeconds = starting, backlog, 3600
	return r
}

func burstFresh(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	// A node that has just started, alone on the key: the pool is full,
	// and it takes what its backlog needs, within its own depth.
	g, err := b.Sync(ctx, burstReport(key, "a", 0, 0.3, true))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	require.InDelta(t, 0.3, g.Credit, 1e-6, "its backlog")
	require.InDelta(t, 0.7, g.Pool, 1e-6)
	// Within its own depth: share 1 less its level 0.8.
	r := burstReport(key, "a", 1, 5, false)
	r.Level = 0.8
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 0.2, g.Credit, 1e-6, "its own depth")
	require.InDelta(t, 0.5, g.Pool, 1e-4)
	// Another node starting while a's lease lives finds no fresh pool:
	// nothing beyond what is left (its share is 0 until a lowers).
	g, err = b.Sync(ctx, burstReport(key, "b", 0, 5, true))
	require.NoError(t, err)
	require.Zero(t, g.Credit)
	require.InDelta(t, 0.5, g.Pool, 1e-4)
	// Nobody without backlog is credited.
	g, err = b.Sync(ctx, burstReport(key, "a", 1, 0, false))
	require.NoError(t, err)
	require.Zero(t, g.Credit)
	// A node that is not starting never makes a fresh pool.
	key2 := uniqueKey(t)
	g, err = b.Sync(ctx, burstReport(key2, "a", 0, 1, false))
	require.NoError(t, err)
	require.Zero(t, g.Credit)
	require.Zero(t, g.Pool)
}

// burstConcurrent: four nodes with backlog sync concurrently after a
// fresh start; whatever the interleaving, the credits sum to the pool
// (1, less a negligible decay), never more.
func burstConcurrent(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	g, err := b.Sync(ctx, burstReport(key, "n0", 0, 0, true))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Pool, 1e-9)
	var mu sync.Mutex
	var credits float64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", i)
			var share float64
			for range 15 {
				// Starting on every sync: an unexpired lease keeps the pool
				// from being made afresh.
				g, err := b.Sync(ctx, burstReport(key, node, share, 1, true))
				if err != nil {
					errs <- err
					return
				}
				if g.Credit < 0 || g.Credit > g.Share+1e-9 {
					errs <- fmt.Errorf("credit %v beyond share %v", g.Credit, g.Share)
					return
				}
				mu.Lock()
				credits += g.Credit
				mu.Unlock()
				share = g.Share
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, credits, 1+1e-9, "the credits never sum above the pool")
	require.Greater(t, credits, 0.99, "and the pool is spent")
}

func burstDecay(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	// Share 1 held, a burst refilled in 1 s: the pool is gone within a
	// second (the node's bucket has refilled that much meanwhile).
	r := burstReport(key, "a", 0, 0, true)
	r.BurstSeconds = 1
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 1, g.Pool, 1e-9)
	r.Starting, r.Share = false, g.Share
	require.Eventually(t, func() bool {
		g, err := b.Sync(ctx, r)
		require.NoError(t, err)
		return g.Pool == 0
	}, 5*time.Second, 50*time.Millisecond)
	r.Backlog = 1
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.Zero(t, g.Credit)
}

func burstReturned(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	// No fresh pool (a is not starting); a drops half a burst lowering
	// its share and reports it: it comes back to the pool.
	g, err := b.Sync(ctx, burstReport(key, "a", 0, 0, false))
	require.NoError(t, err)
	require.Zero(t, g.Pool)
	require.InDelta(t, 1, g.Share, 1e-9)
	g, err = b.Sync(ctx, burstReport(key, "b", 0, 0, false))
	require.NoError(t, err)
	require.Zero(t, g.Share, "a holds it all")
	// a lowers to half and reports what that dropped.
	r := burstReport(key, "a", 1, 0, false)
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 0.5, g.Share, 1e-9)
	r = burstReport(key, "a", 0.5, 0, false)
	r.Returned = 0.5
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 0.5, g.Pool, 1e-3)
	// b, with backlog, takes it with the share a released.
	g, err = b.Sync(ctx, burstReport(key, "b", 0, 1, false))
	require.NoError(t, err)
	require.InDelta(t, 0.5, g.Share, 1e-9)
	require.InDelta(t, 0.5, g.Credit, 1e-3)
	require.InDelta(t, 0, g.Pool, 1e-9)
	// A drop reported by a node without an unexpired lease is not taken back:
	// it cannot tell when it happened.
	r = burstReport(key, "c", 0, 0, false)
	r.Returned = 0.5
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 0, g.Pool, 1e-9)
}

// burstAfterExpiry: once every lease has expired, a node that has just
// started finds the pool full again (as a lone node assumes its bucket
// full when it starts); a node that was running (back from its fallback)
// does not.
func burstAfterExpiry(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	r := burstReport(key, "a", 0, 1, true)
	r.TTL = 200 * time.Millisecond
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 1, g.Credit, 1e-9)
	require.Zero(t, g.Pool)
	// a dies. c, running all along, syncs after the expiry: no pool.
	r = burstReport(key, "c", 0, 1, false)
	require.Eventually(t, func() bool {
		g, err := b.Sync(ctx, r)
		require.NoError(t, err)
		return len(g.Leases) == 1 && g.Share > 0.99
	}, 5*time.Second, 50*time.Millisecond)
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.Zero(t, g.Credit)
	require.Zero(t, g.Pool)
	// c stops; b starts with no unexpired lease: a full pool.
	require.NoError(t, b.Leave(ctx, key, "c", incOf("c")))
	g, err = b.Sync(ctx, burstReport(key, "b", 0, 0.4, true))
	require.NoError(t, err)
	require.Len(t, g.Leases, 1)
	require.InDelta(t, 0.4, g.Credit, 1e-6)
	require.InDelta(t, 0.6, g.Pool, 1e-6)
}

func loneNode(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	g, err := b.Sync(ctx, report(key, "a", 0, 0))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	require.Equal(t, 12, g.Slots)
	require.Len(t, g.Leases, 1)
	require.Equal(t, "a", g.Leases[0].Node)
	require.InDelta(t, 1, g.Leases[0].Share, 1e-9, "the lease holds the grant")
	require.True(t, g.PausedUntil.IsZero())
}

func badReport(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	for _, r := range []cluster.Report{
		{Key: "", Node: "a", TTL: time.Second},
		{Key: "k", Node: "a", Share: 2, TTL: time.Second},
		{Key: "k", Node: "a", Demand: -1, TTL: time.Second},
		{Key: "k", Node: "a"},
	} {
		_, err := b.Sync(ctx, r)
		require.ErrorIs(t, err, cluster.ErrBadReport)
	}
}

// sumHeld checks the invariant on a grant's leases.
func sumHeld(t *testing.T, g cluster.Grant, maxSlots int) {
	t.Helper()
	var s float64
	n := 0
	for _, l := range g.Leases {
		s += l.Share
		n += l.Slots
	}
	require.LessOrEqual(t, s, 1+1e-9, "shares held: %+v", g.Leases)
	require.LessOrEqual(t, n, maxSlots, "slots held: %+v", g.Leases)
}

func neverAboveOne(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	nodes := []string{"a", "b", "c"}
	held := map[string]float64{}
	slots := map[string]int{}
	demands := [][]float64{{0, 0, 0}, {10, 1, 1}, {10, 1, 1}, {1, 1, 10}, {1, 1, 10}, {1, 1, 10}, {5, 5, 5}, {5, 5, 5}, {5, 5, 5}}
	var last cluster.Grant
	for _, ds := range demands {
		for i, n := range nodes {
			r := report(key, n, held[n], ds[i])
			r.Slots = slots[n]
			g, err := b.Sync(ctx, r)
			require.NoError(t, err)
			sumHeld(t, g, 12)
			held[n], slots[n] = g.Share, g.Slots // the node applies its grant
			last = g
		}
	}
	// Equal demand converges to equal shares (within the rounds run).
	for _, l := range last.Leases {
		require.InDelta(t, 1.0/3, l.Share, 0.02, "%+v", last.Leases)
		require.Equal(t, 4, l.Slots)
	}
	// Demand-weighted: after a few rounds of {10, 1, 1}, a gets most.
	for range 3 {
		for i, n := range nodes {
			g, err := b.Sync(ctx, report(key, n, held[n], []float64{10, 1, 1}[i]))
			require.NoError(t, err)
			sumHeld(t, g, 12)
			held[n] = g.Share
		}
	}
	require.Greater(t, held["a"], 0.7)
	require.GreaterOrEqual(t, held["b"], cluster.FloorShareMax-1e-9)
}

func lowerFirst(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	g, err := b.Sync(ctx, report(key, "a", 0, 1))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	// b arrives: nothing is free, so it gets nothing yet.
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.InDelta(t, 0, g.Share, 1e-9)
	// a is told to lower to half, but its lease keeps the whole until a
	// reports the lower share.
	g, err = b.Sync(ctx, report(key, "a", 1, 1))
	require.NoError(t, err)
	require.InDelta(t, 0.5, g.Share, 1e-9)
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.InDelta(t, 0, g.Share, 1e-9, "a has not released yet")
	_, err = b.Sync(ctx, report(key, "a", 0.5, 1))
	require.NoError(t, err)
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.InDelta(t, 0.5, g.Share, 1e-9)
}

func concurrent(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", i)
			var share float64
			slots := 0
			for k := range 15 {
				r := report(key, node, share, float64((i+k)%4))
				r.Slots = slots
				g, err := b.Sync(ctx, r)
				if err != nil {
					errs <- err
					return
				}
				var s float64
				n := 0
				for _, l := range g.Leases {
					s += l.Share
					n += l.Slots
				}
				if s > 1+1e-9 || n > 12 {
					errs <- fmt.Errorf("held %v shares, %d slots: %+v", s, n, g.Leases)
					return
				}
				share, slots = g.Share, g.Slots
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func expiry(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	r := report(key, "a", 0, 1)
	r.TTL = 200 * time.Millisecond
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	// a dies; b gets nothing until a's lease expires, then everything.
	require.Eventually(t, func() bool {
		g, err := b.Sync(ctx, report(key, "b", 0, 1))
		require.NoError(t, err)
		return g.Share > 0.99 && len(g.Leases) == 1
	}, 5*time.Second, 50*time.Millisecond)
}

func leave(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	_, err := b.Sync(ctx, report(key, "a", 0, 1))
	require.NoError(t, err)
	require.NoError(t, b.Leave(ctx, key, "a", incOf("a")))
	g, err := b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	require.Len(t, g.Leases, 1)
}

func pause(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	until := time.Now().Add(5 * time.Second).Truncate(time.Millisecond) //nolint:forbidigo // the shared store expires on its own wall clock
	r := report(key, "a", 0, 1)
	r.PausedUntil = until
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.PausedUntil.Equal(until), "%v", g.PausedUntil)
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.True(t, g.PausedUntil.Equal(until), "another node sees it")
	r = report(key, "b", 0, 1)
	r.PausedUntil = until.Add(-time.Second)
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.PausedUntil.Equal(until), "an earlier pause does not shorten it")
}

func leadership(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	name := uniqueKey(t)
	ok, err := b.Lead(ctx, name, "a", incOf("a"), 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.Lead(ctx, name, "b", incOf("b"), time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "a holds it")
	ok, err = b.Lead(ctx, name, "a", "other-a", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "another process under a's id does not share it")
	ok, err = b.Lead(ctx, name, "a", incOf("a"), 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok, "a renews")
	require.Eventually(t, func() bool {
		ok, err := b.Lead(ctx, name, "b", incOf("b"), time.Minute)
		require.NoError(t, err)
		return ok
	}, 5*time.Second, 50*time.Millisecond, "b takes over once a's lease expires")
	ok, err = b.Lead(ctx, name, "a", incOf("a"), time.Minute)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = b.Lead(ctx, name, "b-renamed", incOf("b"), time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "the holder is the process: it renews under a new id")
}

func breakerOpens(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond) //nolint:forbidigo // the shared store expires on its own wall clock
	r := report(key, "a", 0, 1)
	r.BreakerOpenUntil = until
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.BreakerOpenUntil.Equal(until), "%v", g.BreakerOpenUntil)
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.True(t, g.BreakerOpenUntil.Equal(until), "another node sees the opening")
	// Nobody probes before the opening ends.
	r = report(key, "b", 0, 1)
	r.WantProbe = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.False(t, g.Probe)
	// An earlier opening does not shorten it; a close from a node without
	// the token does not clear it.
	r = report(key, "c", 0, 1)
	r.BreakerOpenUntil = until.Add(-time.Second)
	_, err = b.Sync(ctx, r)
	require.NoError(t, err)
	r = report(key, "c", 0, 1)
	r.BreakerClosed = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.BreakerOpenUntil.Equal(until))
}

// openPast publishes an opening that has already ended, so probing may
// start at once.
func openPast(t *testing.T, b cluster.Backend, key string) {
	t.Helper()
	r := report(key, "a", 0, 1)
	r.BreakerOpenUntil = time.Now().Add(-time.Second).Truncate(time.Millisecond) //nolint:forbidigo // the shared store expires on its own wall clock
	_, err := b.Sync(context.Background(), r)
	require.NoError(t, err)
}

func probeToken(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	openPast(t, b, key)
	// Many nodes want to probe at once: exactly one holds the token.
	var mu sync.Mutex
	holders := map[string]bool{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", i)
			for range 5 {
				r := report(key, node, 0, 1)
				r.WantProbe = true
				g, err := b.Sync(ctx, r)
				if !assertNoError(t, err) {
					return
				}
				if g.Probe {
					mu.Lock()
					holders[node] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, holders, 1, "one probe token cluster-wide: %v", holders)
	var holder string
	for h := range holders {
		holder = h
	}
	other := "n0"
	if holder == other {
		other = "n1"
	}
	// The holder keeps it; a close from it clears the opening for all.
	r := report(key, holder, 0, 1)
	r.WantProbe = true
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe)
	r = report(key, holder, 0, 1)
	r.BreakerClosed = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.BreakerOpenUntil.IsZero(), "closed for all")
	require.False(t, g.Probe)
	g, err = b.Sync(ctx, report(key, other, 0, 1))
	require.NoError(t, err)
	require.True(t, g.BreakerOpenUntil.IsZero())
	// A new opening takes the token back.
	openPast(t, b, key)
	r = report(key, other, 0, 1)
	r.WantProbe = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe)
	r = report(key, holder, 0, 1)
	r.BreakerOpenUntil = time.Now().Add(-500 * time.Millisecond).Truncate(time.Millisecond) //nolint:forbidigo // the shared store expires on its own wall clock
	r.WantProbe = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe, "the failed probe's token is free again, the reopener may take it")
	r = report(key, other, 0, 1)
	r.WantProbe = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.False(t, g.Probe)
}

func probeExpiry(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	openPast(t, b, key)
	r := report(key, "a", 0, 1)
	r.WantProbe, r.TTL = true, 200*time.Millisecond
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe)
	// a dies holding the token: b gets it once it expires.
	require.Eventually(t, func() bool {
		r := report(key, "b", 0, 1)
		r.WantProbe = true
		g, err := b.Sync(ctx, r)
		require.NoError(t, err)
		return g.Probe
	}, 5*time.Second, 50*time.Millisecond)
}

// assertNoError reports err from a goroutine other than the test's.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func probeRelease(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	openPast(t, b, key)
	r := report(key, "a", 0, 1)
	r.WantProbe = true
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe)
	r = report(key, "b", 0, 1)
	r.WantProbe = true
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.False(t, g.Probe, "a holds it")
	// a has no work to probe with any more: it gives the token back.
	g, err = b.Sync(ctx, report(key, "a", 0, 1))
	require.NoError(t, err)
	require.False(t, g.Probe)
	require.False(t, g.BreakerOpenUntil.IsZero(), "the opening stays")
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.True(t, g.Probe, "b probes at once, without waiting for a's token to expire")
}
