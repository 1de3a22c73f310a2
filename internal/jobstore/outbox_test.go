package jobstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
)

// TestOutboxAtomicWithCompletion: the delivery row is part of the
// transaction that finishes the job. A completion whose transaction rolls
// back leaves neither the finished job nor a delivery; the completion that
// commits leaves both.
func TestOutboxAtomicWithCompletion(t *testing.T) {
	t.Parallel()
	finish := `UPDATE sluice_jobs SET state = 'succeeded', finished_at = updated_at, lease_expires_at = NULL WHERE id = `
	count := `SELECT count(*) FROM sluice_webhook_deliveries WHERE job_id = `
	tests := []struct {
		name string
		dsn  func(t testing.TB) string
		// rollback finishes job id in a transaction, checks the delivery is
		// there inside it, and rolls it back.
		rollback func(t *testing.T, dsn string, id int64)
	}{
		{"sqlite", sqliteDSN, func(t *testing.T, dsn string, id int64) {
			db, err := sql.Open("sqlite", strings.TrimPrefix(dsn, "sqlite:")+"?_pragma=busy_timeout(5000)")
			require.NoError(t, err)
			defer db.Close()
			tx, err := db.Begin()
			require.NoError(t, err)
			_, err = tx.Exec(finish+"?", id)
			require.NoError(t, err)
			var n int
			require.NoError(t, tx.QueryRow(count+"?", id).Scan(&n))
			require.Equal(t, 1, n, "the delivery is written with the completion")
			require.NoError(t, tx.Rollback())
		}},
		{"postgres", jobstoretest.PostgresDSN, func(t *testing.T, dsn string, id int64) {
			ctx := context.Background()
			c, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close(ctx)) }()
			tx, err := c.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, finish+"$1", id)
			require.NoError(t, err)
			var n int
			require.NoError(t, tx.QueryRow(ctx, count+"$1", id).Scan(&n))
			require.Equal(t, 1, n, "the delivery is written with the completion")
			require.NoError(t, tx.Rollback(ctx))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := tc.dsn(t)
			s, err := jobstore.Open(ctx, dsn, jobstore.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			res, err := s.Insert(ctx, jobstore.InsertParams{Upstream: "a", Priority: llm.Normal, Path: "/v1/messages", MaxAttempts: 1,
				WebhookURL: "https://example.com/hook", Now: jobstoretest.T0})
			require.NoError(t, err)
			id := res.Job.ID
			claimed, err := s.Claim(ctx, jobstore.ClaimParams{Limit: 1, Owner: "w", LeaseFor: time.Minute, Now: jobstoretest.T0})
			require.NoError(t, err)
			require.Len(t, claimed, 1)

			tc.rollback(t, dsn, id)
			ds, err := s.Deliveries(ctx, id)
			require.NoError(t, err)
			require.Empty(t, ds, "a rolled-back completion leaves no delivery")
			j, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateRunning, j.State)

			require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: id, Token: claimed[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: jobstoretest.T0}))
			ds, err = s.Deliveries(ctx, id)
			require.NoError(t, err)
			require.Len(t, ds, 1)
		})
	}
}
