package jobstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sqliteDSN returns a fresh database file for one test.
func sqliteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "sluice.db")
}

func openSQLite(t *testing.T) jobstore.Store {
	s, err := jobstore.Open(context.Background(), sqliteDSN(t), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func openPostgres(t *testing.T) jobstore.Store {
	s, err := jobstore.Open(context.Background(), jobstoretest.PostgresDSN(t), jobstore.Options{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	jobstoretest.Run(t, openSQLite)
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	jobstoretest.Run(t, openPostgres)
}

// TestPostgresInsertNotifiesOtherNodes listens on the NOTIFY channel as
// another node would: every insert must be followed by a NOTIFY of its
// upstream, including an insert whose NOTIFY was held back by the cooldown.
func TestPostgresInsertNotifiesOtherNodes(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	s, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer func() { require.NoError(t, conn.Close(context.Background())) }()
	_, err = conn.Exec(ctx, "LISTEN sluice_jobs")
	require.NoError(t, err)
	// The channel is database-wide: other tests notify too, so wait for
	// this test's own upstream.
	var b [6]byte
	_, _ = rand.Read(b[:])
	upstream := "notify-" + hex.EncodeToString(b[:])
	waitFor := func() {
		for {
			n, err := conn.WaitForNotification(ctx)
			require.NoError(t, err, "no NOTIFY for %s", upstream)
			if n.Payload == upstream {
				return
			}
		}
	}
	for i := range 3 {
		_, err := s.Insert(ctx, jobstore.InsertParams{Upstream: upstream, Path: "/v1/messages", MaxAttempts: 1, Now: time.Now()})
		require.NoError(t, err, "insert %d", i)
		waitFor()
	}
}
