package jobstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

// TestPostgresFencedLookupsProbePrimaryKey: on a queue whose table was
// empty when its connections first planned them, heartbeats, completions
// and failures still find their job through the primary key. With schema 2
// the lease index's predicate (state = 'running') was implied by these
// lookups, and the cached generic plans walked that whole index instead:
// every completion then cost more with every job in flight.
func TestPostgresFencedLookupsProbePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := jobstoretest.PostgresDSN(t)
	s, err := jobstore.Open(ctx, dsn, jobstore.Options{MaxConns: 2})
	require.NoError(t, err)
	t0 := jobstoretest.T0
	var jobs []*jobstore.Job
	for range 4 {
		r, err := s.Insert(ctx, jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", Body: []byte(`{}`), MaxAttempts: 3, Now: t0})
		require.NoError(t, err)
		claimed, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: 1, Owner: "w", LeaseFor: time.Minute, Now: t0})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, r.Job.ID, claimed[0].ID)
		jobs = append(jobs, claimed[0])
	}
	for _, j := range jobs {
		require.NoError(t, s.Heartbeat(ctx, jobstore.HeartbeatParams{ID: j.ID, Token: j.Lease.Token, LeaseFor: time.Minute, Now: t0}))
	}
	for _, j := range jobs[:3] {
		require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: jobstore.Result{Status: 200}, Now: t0}))
	}
	_, err = s.Fail(ctx, jobstore.FailParams{ID: jobs[3].ID, Token: jobs[3].Lease.Token, Kind: jobstore.FailTerminal,
		Error: jobstore.AttemptError{Status: 400, Message: "bad"}, Now: t0})
	require.NoError(t, err)
	require.NoError(t, s.Close()) // its backends report their statistics as they end

	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(ctx)) }()
	scans := func() (pkey, lease int64) {
		err := c.QueryRow(ctx, `SELECT
			coalesce(sum(idx_scan) FILTER (WHERE indexrelname = 'sluice_jobs_pkey'), 0),
			coalesce(sum(idx_scan) FILTER (WHERE indexrelname = 'sluice_jobs_lease'), 0)
			FROM pg_stat_user_indexes WHERE schemaname = current_schema()`).Scan(&pkey, &lease)
		require.NoError(t, err)
		return pkey, lease
	}
	require.Eventually(t, func() bool {
		_, _ = c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		pkey, lease := scans()
		return pkey+lease >= 7 // 4 heartbeats, the completions, a failure's lock and update
	}, 10*time.Second, 20*time.Millisecond, "the backends' statistics never arrived")
	_, lease := scans()
	require.Zero(t, lease, "no fenced lookup walked the lease index")
}

// TestPostgresCountLiveReadsIndexesOnly: the live counts read the partial
// indexes of queued and running jobs, never the whole table, even with
// plans made while the table was empty (the scrape of a gateway's /metrics
// runs it every few seconds, whatever the backlog). The running count must
// name lease_expires_at IS NOT NULL to use the lease index; without it,
// it was a sequential scan over every job, finished ones included.
func TestPostgresCountLiveReadsIndexesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := jobstoretest.PostgresDSN(t)
	migrated, err := jobstore.Open(ctx, dsn, jobstore.Options{MaxConns: 2})
	require.NoError(t, err)
	require.NoError(t, migrated.Close())
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(ctx)) }()
	stat := func(q string) int64 {
		t.Helper()
		_, err := c.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		require.NoError(t, err)
		var n int64
		require.NoError(t, c.QueryRow(ctx, q).Scan(&n))
		return n
	}
	const (
		seqScans   = `SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'sluice_jobs'`
		inserted   = `SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'sluice_jobs'`
		leaseScans = `SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE schemaname = current_schema() AND indexrelname = 'sluice_jobs_lease'`
		migrations = `SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname = 'sluice_schema_migrations'`
	)
	require.Eventually(t, func() bool { return stat(migrations) > 0 }, 10*time.Second, 20*time.Millisecond,
		"the migrating backend's statistics never arrived")
	before := stat(seqScans)

	s, err := jobstore.Open(ctx, dsn, jobstore.Options{MaxConns: 2, NoMigrate: true})
	require.NoError(t, err)
	t0 := jobstoretest.T0
	// Planned on the empty table: concurrent calls prepare the statement
	// on both connections (generic plans, see newPgPool), which keep it.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			counts, err := s.CountLive(ctx, t0)
			assert.NoError(t, err)
			assert.Empty(t, counts)
		})
	}
	wg.Wait()
	var counts []jobstore.LiveCount
	for _, u := range []string{"a", "a", "b"} {
		_, err := s.Insert(ctx, jobstore.InsertParams{Upstream: u, Path: "/v1/messages", Body: []byte(`{}`), MaxAttempts: 3, Now: t0})
		require.NoError(t, err)
	}
	_, err = s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: 1, Owner: "w", LeaseFor: time.Minute, Now: t0})
	require.NoError(t, err)
	counts, err = s.CountLive(ctx, t0)
	require.NoError(t, err)
	require.Equal(t, []jobstore.LiveCount{{Upstream: "a", Queued: 1, Running: 1}, {Upstream: "b", Queued: 1}}, counts)
	require.NoError(t, s.Close()) // its backend reports its statistics as it ends

	// The store's backends report as they end, in no set order: wait for
	// the inserts, and for either both counts' index scans or a sequential
	// scan.
	require.Eventually(t, func() bool {
		return stat(inserted) >= 3 && (stat(leaseScans) >= 2 || stat(seqScans) > before)
	}, 10*time.Second, 20*time.Millisecond, "the store's statistics never arrived")
	require.Equal(t, before, stat(seqScans), "nothing read the jobs table sequentially")
	require.GreaterOrEqual(t, stat(leaseScans), int64(2), "each count read the lease index")
}

// TestPostgresSpendHoldsNeverScanTheTable: every spend hold statement
// (open, settle, renew, read, reap) is planned on an index under the
// store's settings. This store prices sequential scans out, and a
// statement priced that high is JIT-compiled on every execution: a reap
// took a second before the lease index. A settlement finds its holds by
// key: joined on the owner's holds, it walked every dead index entry the
// owner had left since the last vacuum.
func TestPostgresSpendHoldsNeverScanTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := jobstoretest.PostgresDSN(t)
	s, err := jobstore.Open(ctx, dsn, jobstore.Options{MaxConns: 2})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(ctx)) }()
	_, err = c.Exec(ctx, "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	t0 := jobstoretest.T0
	for name, q := range jobstore.SpendHoldStatements(t0) {
		var plan string
		require.NoError(t, c.QueryRow(ctx, "EXPLAIN (FORMAT JSON, COSTS true) "+q.SQL, q.Args...).Scan(&plan), name)
		require.NotContains(t, plan, `"Seq Scan"`, "%s: %s", name, plan)
		require.NotContains(t, plan, `10000000`, "%s is priced as a sequential scan: %s", name, plan)
		if name == "settle" { // by key, not every entry of the owner's (dead ones included)
			require.Contains(t, plan, `seq = ANY`, plan)
		}
	}
}
