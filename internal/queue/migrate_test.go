package queue_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/queue/queuetest"
)

func testMigrations(t *testing.T, dsn string, bump func(t *testing.T)) {
	ctx := context.Background()
	m, err := queue.OpenMigrator(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close()) }()

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Current)
	require.Equal(t, []string{"0001_jobs"}, st.Pending)

	done, err := m.Up(ctx, queuetest.T0)
	require.NoError(t, err)
	require.Equal(t, []int{1}, done)
	done, err = m.Up(ctx, queuetest.T0)
	require.NoError(t, err)
	require.Empty(t, done, "up twice applies nothing")

	s, err := queue.Open(ctx, dsn, queue.Options{NoMigrate: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	done, err = m.Down(ctx, 1, queuetest.T0)
	require.NoError(t, err)
	require.Equal(t, []int{1}, done)
	_, err = queue.Open(ctx, dsn, queue.Options{NoMigrate: true})
	require.ErrorContains(t, err, "sluice migrate up")

	_, err = m.Up(ctx, queuetest.T0)
	require.NoError(t, err)
	bump(t)
	_, err = queue.Open(ctx, dsn, queue.Options{})
	require.ErrorIs(t, err, queue.ErrSchemaTooNew)
	_, err = m.Up(ctx, queuetest.T0)
	require.ErrorIs(t, err, queue.ErrSchemaTooNew)
}

func TestMigrationsSQLite(t *testing.T) {
	t.Parallel()
	dsn := sqliteDSN(t)
	testMigrations(t, dsn, func(t *testing.T) {
		db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:"))
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(`INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)`)
		require.NoError(t, err)
	})
}

func TestMigrationsPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	testMigrations(t, dsn, func(t *testing.T) {
		c, err := pgx.Connect(context.Background(), dsn)
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close(context.Background())) }()
		_, err = c.Exec(context.Background(), `INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (99, 'future', now())`)
		require.NoError(t, err)
	})
}

func TestOpenRejectsBadDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "mysql://x", "sqlite:", "sqlite::memory:", "sqlite:a.db?mode=ro"} {
		_, err := queue.Open(context.Background(), dsn, queue.Options{})
		require.ErrorContains(t, err, "bad store address", dsn)
	}
}
