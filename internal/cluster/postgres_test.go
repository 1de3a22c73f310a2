package cluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/cluster/clustertest"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenPostgres(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}

// pgSchemaBeforeIncarnations is the cluster's schema as the release
// before incarnations created it.
const pgSchemaBeforeIncarnations = `
CREATE TABLE sluice_cluster_leases (
	key text NOT NULL, node text NOT NULL, share double precision NOT NULL, demand double precision NOT NULL,
	slots integer NOT NULL, slot_demand double precision NOT NULL, expires_at timestamptz NOT NULL,
	PRIMARY KEY (key, node));
CREATE TABLE sluice_cluster_signals (key text PRIMARY KEY, paused_until timestamptz, open_until timestamptz,
	probe_node text, probe_expires timestamptz, pool double precision NOT NULL DEFAULT 0, pool_at timestamptz);
CREATE TABLE sluice_cluster_leaders (name text PRIMARY KEY, node text NOT NULL, expires_at timestamptz NOT NULL);
INSERT INTO sluice_cluster_leases VALUES ('up/k', 'a', 1, 1, 12, 1, now() + interval '1 minute');
INSERT INTO sluice_cluster_leaders VALUES ('maintenance', 'a', now() + interval '1 minute');`

// TestPostgresMigratesLeasesWithoutIncarnations: opening a database
// whose tables predate incarnations adds the columns; the unexpired lease and
// leadership an older process wrote under the same id are taken over as
// a predecessor's (kept aside, waited for), never renewed as ours.
func TestPostgresMigratesLeasesWithoutIncarnations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := jobstoretest.PostgresDSN(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, pgSchemaBeforeIncarnations)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	b, err := cluster.OpenPostgres(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	again, err := cluster.OpenPostgres(ctx, dsn) // a second open finds nothing to do
	require.NoError(t, err)
	require.NoError(t, again.Close())

	g, err := b.Sync(ctx, cluster.Report{Key: "up/k", Node: "a", Incarnation: "new", Demand: 1, MaxSlots: 12, TTL: time.Minute})
	require.NoError(t, err)
	require.Zero(t, g.Share, "the old lease is still held")
	require.Len(t, g.Leases, 2)
	require.Equal(t, cluster.Lease{Node: "a", Incarnation: "new", Share: 0, Demand: 1, Slots: 0, ExpiresAt: g.Leases[0].ExpiresAt}, g.Leases[0])
	require.Equal(t, "a~", g.Leases[1].Node, "kept aside: %+v", g.Leases)
	require.InDelta(t, 1, g.Leases[1].Share, 1e-9)
	lead, err := b.Lead(ctx, cluster.LeaderName, "a", "new", time.Minute)
	require.NoError(t, err)
	require.False(t, lead, "the old process's leadership is not ours")
}
