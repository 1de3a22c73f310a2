package jobstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSQLiteCanceledWriteKeepsItsGroup: a caller that gives up while its
// statement runs must not undo the rest of its group commit. SQLite answers
// an interrupted write inside a transaction by rolling back the whole
// transaction; the writes around it then failed, or were committed on their
// own and reported failed.
func TestSQLiteCanceledWriteKeepsItsGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "q.db"), Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	s := backend(st).(*sqliteStore)

	op := func(ctx context.Context, fn func(context.Context, sqliteTx, *[]string) error) *sqliteOp {
		return &sqliteOp{ctx: ctx, fn: fn, res: make(chan error, 1)}
	}
	pause := func(upstream string) func(context.Context, sqliteTx, *[]string) error {
		return func(ctx context.Context, tx sqliteTx, _ *[]string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO sluice_paused_upstreams (upstream, paused_at) VALUES (?, 0)`, upstream)
			return err
		}
	}
	slowCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	slow := op(slowCtx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		time.AfterFunc(10*time.Millisecond, cancel) // while the statement below runs
		_, err := tx.ExecContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
			INSERT INTO sluice_paused_upstreams (upstream, paused_at) SELECT 'slow', count(*) FROM c`)
		return err
	})
	before, after := op(ctx, pause("before")), op(ctx, pause("after"))
	s.commit([]*sqliteOp{before, slow, after})
	require.ErrorIs(t, slowCtx.Err(), context.Canceled, "the caller gave up while its statement ran")
	for _, o := range []*sqliteOp{before, slow, after} {
		require.NoError(t, <-o.res)
	}
	var n int
	require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM sluice_paused_upstreams`).Scan(&n))
	require.Equal(t, 3, n, "every write of the group committed")
}
