package jobstore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

// TestStoreOutageIsErrUnavailable makes the store unable to answer (the
// SQLite file full, the PostgreSQL server cut off by a proxy) and checks
// that every kind of call answers jobstore.ErrUnavailable, and that the
// store works again once the outage ends.
func TestStoreOutageIsErrUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// open returns a store and the functions that start and end its
		// outage.
		open func(t *testing.T) (st jobstore.Store, down, up func())
	}{
		{"sqlite full", func(t *testing.T) (jobstore.Store, func(), func()) {
			st := openSQLite(t)
			ctx := context.Background()
			return st, func() {
					_, err := jobstore.SetSQLiteMaxPages(ctx, st, 0)
					require.NoError(t, err)
				}, func() {
					_, err := jobstore.SetSQLiteMaxPages(ctx, st, jobstore.SQLiteMaxPagesNone)
					require.NoError(t, err)
				}
		}},
		{"postgres cut", func(t *testing.T) (jobstore.Store, func(), func()) {
			st, p := jobstoretest.OpenBehindProxy(t, jobstoretest.PostgresDSN(t), 4)
			return st, p.Cut, p.Restore
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, down, up := tc.open(t)
			ctx := context.Background()
			now := time.Now()
			insert := func(n int) error {
				_, err := st.Insert(ctx, jobstore.InsertParams{Upstream: "a", Path: "/v1/messages",
					Body: bytes.Repeat([]byte("x"), n), MaxAttempts: 1, Now: now})
				return err
			}
			require.NoError(t, insert(10))
			jobs, err := st.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Limit: 1, Owner: "w", LeaseFor: time.Minute, Now: now})
			require.NoError(t, err)
			require.Len(t, jobs, 1)

			down()
			err = insert(64 << 10)
			require.ErrorIs(t, err, jobstore.ErrUnavailable)
			err = st.Complete(ctx, jobstore.CompleteParams{ID: jobs[0].ID, Token: jobs[0].Lease.Token,
				Result: jobstore.Result{Status: 200, Body: bytes.Repeat([]byte("y"), 64<<10)}, Now: now})
			require.ErrorIs(t, err, jobstore.ErrUnavailable)
			require.NotErrorIs(t, err, jobstore.ErrLeaseLost)

			up()
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				require.NoError(c, insert(64<<10))
			}, 10*time.Second, 20*time.Millisecond)
			require.NoError(t, st.Complete(ctx, jobstore.CompleteParams{ID: jobs[0].ID, Token: jobs[0].Lease.Token,
				Result: jobstore.Result{Status: 200}, Now: now}))
		})
	}
}

// TestOpenNamesTheDirectoryProblem: a store file that cannot be created
// says why, not SQLite's "unable to open database file (14)".
func TestOpenNamesTheDirectoryProblem(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope")
	readOnly := t.TempDir()
	require.NoError(t, os.Chmod(readOnly, 0o555))
	t.Cleanup(func() { _ = os.Chmod(readOnly, 0o755) })
	if f, err := os.CreateTemp(readOnly, "probe"); err == nil {
		// Root ignores the mode bits: use a directory no one may write.
		_ = f.Close()
		_ = os.Remove(f.Name())
		readOnly = "/sys"
	}
	tests := []struct {
		name, dir, want string
	}{
		{"missing", missing, "the directory " + missing + " does not exist"},
		{"read-only", readOnly, "the directory " + readOnly + " is not writable ("},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(tc.dir, "sluice.db")
			_, err := jobstore.Open(context.Background(), "sqlite:"+path, jobstore.Options{})
			require.Error(t, err)
			require.Contains(t, err.Error(), "sqlite:"+path+": "+tc.want)
			require.NotContains(t, err.Error(), "(14)")
		})
	}
}
