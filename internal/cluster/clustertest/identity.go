package clustertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
)

// as is r sent by the process inc under r's node id, renewing its lease
// or not.
func as(r cluster.Report, inc string, renew bool) cluster.Report {
	r.Incarnation, r.Renew = inc, renew
	return r
}

// leaseOf returns the lease of node in g, and whether there is one.
func leaseOf(g cluster.Grant, node string) (cluster.Lease, bool) {
	for _, l := range g.Leases {
		if l.Node == node {
			return l, true
		}
	}
	return cluster.Lease{}, false
}

// duplicateNode: two live processes under one node id. The second's
// first write takes the lease over and keeps the first's aside (its share
// still held); the first, renewing, is told (ErrDuplicateNode naming the
// second) and nothing is written; taking it back (a write without renew)
// turns the tables (and drops its own lease kept aside: its report holds
// what it applies). A write under a fresh id moves the writer's own
// leases from the former one (Report.From); Leave drops only the
// caller's own leases.
func duplicateNode(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	const old, young = "inc-old", "inc-young"
	g, err := b.Sync(ctx, as(report(key, "a", 0, 1), old, false))
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	g, err = b.Sync(ctx, as(report(key, "a", 1, 1), old, true))
	require.NoError(t, err, "a renewal of its own lease")
	require.InDelta(t, 1, g.Share, 1e-9)

	// The younger's first write: a takeover, not an error; the older's
	// share is kept aside and still held.
	g, err = b.Sync(ctx, as(report(key, "a", 0, 1), young, false))
	require.NoError(t, err)
	require.InDelta(t, 0, g.Share, 1e-9, "the share kept aside is held: %+v", g.Leases)
	sumHeld(t, g, 12)
	mine, ok := leaseOf(g, "a")
	require.True(t, ok)
	require.Equal(t, young, mine.Incarnation)
	aside, ok := leaseOf(g, "a~"+old)
	require.True(t, ok, "kept aside: %+v", g.Leases)
	require.Equal(t, old, aside.Incarnation)
	require.InDelta(t, 1, aside.Share, 1e-9)

	// The older renews: a duplicate, named, and nothing written.
	_, err = b.Sync(ctx, as(report(key, "a", 1, 5), old, true))
	require.ErrorIs(t, err, cluster.ErrDuplicateNode)
	var dup *cluster.DuplicateError
	require.True(t, errors.As(err, &dup))
	require.Equal(t, young, dup.Incarnation)
	require.Equal(t, "a", dup.Node)
	require.Equal(t, key, dup.Key)
	g, err = b.Sync(ctx, as(report(key, "a", 0, 1), young, true))
	require.NoError(t, err, "the younger's lease is untouched")
	mine, _ = leaseOf(g, "a")
	require.Equal(t, young, mine.Incarnation)
	require.InDelta(t, 1, mine.Demand, 1e-9, "the older's demand was not written")

	// The older takes it back; now the younger is told.
	g, err = b.Sync(ctx, as(report(key, "a", 1, 1), old, false))
	require.NoError(t, err)
	sumHeld(t, g, 12)
	mine, _ = leaseOf(g, "a")
	require.Equal(t, old, mine.Incarnation)
	_, ok = leaseOf(g, "a~"+young)
	require.True(t, ok, "the younger's lease kept aside: %+v", g.Leases)
	_, ok = leaseOf(g, "a~"+old)
	require.False(t, ok, "the older's own lease kept aside is taken back: %+v", g.Leases)
	_, err = b.Sync(ctx, as(report(key, "a", 0, 1), young, true))
	require.ErrorIs(t, err, cluster.ErrDuplicateNode)
	require.True(t, errors.As(err, &dup))
	require.Equal(t, old, dup.Incarnation)

	// The younger takes a fresh id: its first write there moves what it
	// held under a (its lease kept aside goes), the older's lease stays.
	r := as(report(key, "a-2", 0, 1), young, false)
	r.From = "a"
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	sumHeld(t, g, 12)
	_, ok = leaseOf(g, "a~"+young)
	require.False(t, ok, "moved: %+v", g.Leases)
	mine, ok = leaseOf(g, "a")
	require.True(t, ok)
	require.Equal(t, old, mine.Incarnation, "another process's lease under From stays")
	_, ok = leaseOf(g, "a-2")
	require.True(t, ok)
	// Leave drops only the caller's own leases.
	require.NoError(t, b.Leave(ctx, key, "a", young))
	g, err = b.Sync(ctx, as(report(key, "a", 1, 1), old, true))
	require.NoError(t, err)
	mine, ok = leaseOf(g, "a")
	require.True(t, ok)
	require.Equal(t, old, mine.Incarnation)
	require.NoError(t, b.Leave(ctx, key, "a", old))
	g, err = b.Sync(ctx, as(report(key, "a-2", 0, 1), young, true))
	require.NoError(t, err)
	require.Len(t, g.Leases, 1, "%+v", g.Leases)
}

// restartTakeover: a node restarted under its id (a new incarnation)
// while its dead predecessor's lease is live is no duplicate: its first
// write takes the lease over, its renewals are not refused, and the
// predecessor's share, kept aside, comes back once that lease expires.
func restartTakeover(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	r := as(report(key, "a", 0, 1), "inc-dead", false)
	r.TTL = 200 * time.Millisecond
	g, err := b.Sync(ctx, r)
	require.NoError(t, err)
	require.InDelta(t, 1, g.Share, 1e-9)
	// The predecessor dies; the restarted process syncs at once.
	g, err = b.Sync(ctx, as(report(key, "a", 0, 1), "inc-new", false))
	require.NoError(t, err, "a takeover, not a duplicate")
	sumHeld(t, g, 12)
	mine, ok := leaseOf(g, "a")
	require.True(t, ok)
	require.Equal(t, "inc-new", mine.Incarnation)
	share := g.Share
	require.Eventually(t, func() bool {
		g, err := b.Sync(ctx, as(report(key, "a", share, 1), "inc-new", true))
		require.NoError(t, err, "its renewals are never refused")
		sumHeld(t, g, 12)
		share = g.Share
		return g.Share > 0.99 && len(g.Leases) == 1
	}, 5*time.Second, 50*time.Millisecond, "the predecessor's share comes back when its lease expires")
	// A clean stop of the new process gives its lease back.
	require.NoError(t, b.Leave(ctx, key, "a", "inc-new"))
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.Len(t, g.Leases, 1)
}
