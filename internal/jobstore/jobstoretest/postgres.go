package jobstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// PostgresDSN creates a fresh schema for one test and returns an address
// whose search_path points at it; the schema is dropped at cleanup. It
// skips when SLUICE_TEST_POSTGRES_URL is unset and fails when it is set but
// the server cannot be reached. Every PostgreSQL test (store, cluster,
// multi-process) takes its database from here.
func PostgresDSN(t testing.TB) string {
	t.Helper()
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
