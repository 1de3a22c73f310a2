package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/cluster/clustertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// postgresDSN creates a fresh schema for one test and returns an address
// whose search_path points at it; skipped when SLUICE_TEST_POSTGRES_URL is
// unset, failed when it is set but unreachable.
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

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenPostgres(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}
