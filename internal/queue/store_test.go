package queue_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/queue/queuetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sqliteDSN returns a fresh database file for one test.
func sqliteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "sluice.db")
}

func openSQLite(t *testing.T) queue.Store {
	s, err := queue.Open(context.Background(), sqliteDSN(t), queue.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// postgresDSN creates a fresh schema for one test and returns an address
// whose search_path points at it; the schema is dropped at cleanup. It
// skips when SLUICE_TEST_POSTGRES_URL is unset and fails when it is set but
// the server cannot be reached.
func postgresDSN(t testing.TB) string {
	base := os.Getenv("SLUICE_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("SLUICE_TEST_POSTGRES_URL is not set; skipping PostgreSQL tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "SLUICE_TEST_POSTGRES_URL is set but PostgreSQL is unreachable")
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "sluice_test_" + hex.EncodeToString(b[:])
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		require.NoError(t, err)
		_, err = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
		require.NoError(t, c.Close(context.Background()))
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func openPostgres(t *testing.T) queue.Store {
	s, err := queue.Open(context.Background(), postgresDSN(t), queue.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, openSQLite)
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	queuetest.Run(t, openPostgres)
}
