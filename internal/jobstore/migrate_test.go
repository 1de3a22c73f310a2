package jobstore_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

func testMigrations(t *testing.T, dsn string, names []string, bump func(t *testing.T)) {
	ctx := context.Background()
	m, err := jobstore.OpenMigrator(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Current)
	require.Equal(t, names, st.Pending)

	done, err := m.Up(ctx, jobstoretest.T0)
	require.NoError(t, err)
	require.Len(t, done, len(names))
	done, err = m.Up(ctx, jobstoretest.T0)
	require.NoError(t, err)
	require.Empty(t, done, "up twice applies nothing")

	s, err := jobstore.Open(ctx, dsn, jobstore.Options{NoMigrate: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	done, err = m.Down(ctx, 1, jobstoretest.T0)
	require.NoError(t, err)
	last, err := strconv.Atoi(names[len(names)-1][:4])
	require.NoError(t, err)
	require.Equal(t, []int{last}, done)
	_, err = jobstore.Open(ctx, dsn, jobstore.Options{NoMigrate: true})
	require.ErrorContains(t, err, "sluice migrate up")

	_, err = m.Up(ctx, jobstoretest.T0)
	require.NoError(t, err)
	bump(t)
	_, err = jobstore.Open(ctx, dsn, jobstore.Options{})
	require.ErrorIs(t, err, jobstore.ErrSchemaTooNew)
	_, err = m.Up(ctx, jobstoretest.T0)
	require.ErrorIs(t, err, jobstore.ErrSchemaTooNew)
}

func TestMigrationsSQLite(t *testing.T) {
	t.Parallel()
	dsn := sqliteDSN(t)
	testMigrations(t, dsn, []string{"0001_jobs", "0002_webhook_outbox", "0003_ownership", "0004_spend", "0005_spend_holds", "0006_provider_batches", "0007_clients", "0008_response_keys", "0009_provider_groups", "0010_batch_webhooks", "0011_job_runs"}, func(t *testing.T) {
		db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:"))
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(`INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)`)
		require.NoError(t, err)
	})
}

func TestMigrationsPostgres(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	testMigrations(t, dsn, []string{"0001_jobs", "0002_leaner_indexes", "0003_lease_index_predicate", "0004_webhook_outbox", "0005_ownership", "0006_spend", "0007_spend_holds", "0008_provider_batches", "0009_clients", "0010_response_keys", "0011_provider_groups", "0012_batch_webhooks", "0013_job_runs"}, func(t *testing.T) {
		c, err := pgx.Connect(context.Background(), dsn)
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close(context.Background())) }()
		_, err = c.Exec(context.Background(), `INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (99, 'future', now())`)
		require.NoError(t, err)
	})
}

// TestMigrationPostgres0002KeepsBatches: batch jobs written under schema 1
// keep their membership (counts, results, uniqueness) after 0002 moves it
// to its own table, and survive a step down and up again.
func TestMigrationPostgres0002KeepsBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := jobstoretest.PostgresDSN(t)
	m, err := jobstore.OpenMigrator(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()
	_, err = m.Up(ctx, jobstoretest.T0)
	require.NoError(t, err)
	toSchema1 := func() { // down every migration after 0001
		t.Helper()
		st, err := m.Status(ctx)
		require.NoError(t, err)
		_, err = m.Down(ctx, len(st.Applied)-1, jobstoretest.T0)
		require.NoError(t, err)
		st, err = m.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Current)
	}
	toSchema1()

	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close(ctx)) }()
	_, err = c.Exec(ctx, `INSERT INTO sluice_batches (id, format, total, created_at) VALUES ('b1', 'anthropic', 2, now());
		INSERT INTO sluice_jobs (upstream, priority, path, body, max_attempts, state, available_at, batch_id, custom_id,
			idempotency_key, created_at, updated_at)
		VALUES ('a', 2, '/v1/messages', '{}', 3, 'queued', now(), 'b1', 'x', NULL, now(), now()),
			('a', 2, '/v1/messages', '{}', 3, 'succeeded', now(), 'b1', 'y', 'key-1', now(), now())`)
	require.NoError(t, err)

	for range 2 { // up, then down and up again
		_, err = m.Up(ctx, jobstoretest.T0)
		require.NoError(t, err)
		s, err := jobstore.Open(ctx, dsn, jobstore.Options{NoMigrate: true})
		require.NoError(t, err)
		b, err := s.GetBatch(ctx, "b1")
		require.NoError(t, err)
		require.Equal(t, jobstore.BatchCounts{Queued: 1, Succeeded: 1}, b.Counts)
		page, err := s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: "b1"})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 2)
		require.Equal(t, "x", page.Jobs[0].CustomID)
		res, err := s.Insert(ctx, jobstore.InsertParams{IdempotencyKey: "key-1", Upstream: "a", Path: "/v1/messages",
			Body: []byte(`{}`), MaxAttempts: 3, Now: jobstoretest.T0})
		require.NoError(t, err)
		require.True(t, res.Existing, "the idempotency key still holds")
		require.NoError(t, s.Close())
		toSchema1()
	}
}

func TestOpenRejectsBadDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:a.db?mode=ro"} {
		_, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
		require.ErrorContains(t, err, "bad store address", dsn)
	}
}

// TestOpenMigratorExistingStore: with ExistingStore a SQLite file that is
// not there is ErrNoStore and stays absent; once created it opens.
func TestOpenMigratorExistingStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "none.db")
	_, err := jobstore.OpenMigrator(ctx, "sqlite:"+path, jobstore.ExistingStore())
	require.ErrorIs(t, err, jobstore.ErrNoStore)
	require.ErrorContains(t, err, path)
	_, statErr := os.Stat(path)
	require.ErrorIs(t, statErr, fs.ErrNotExist)

	m, err := jobstore.OpenMigrator(ctx, "sqlite:"+path)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	m, err = jobstore.OpenMigrator(ctx, "sqlite:"+path, jobstore.ExistingStore())
	require.NoError(t, err)
	require.NoError(t, m.Close())
}
