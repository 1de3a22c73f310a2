package jobstoretest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testCompleteSpooled checks CompleteSpooled: a result a worker kept while
// the store was away completes its job with the lease's token, after a
// rescue that requeued it, and over a later claim's lease; it never
// overwrites a finished job, and applying it twice changes nothing.
func testCompleteSpooled(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	res := jobstore.Result{Status: 200, Header: http.Header{"Request-Id": {"req_spool"}}, Body: []byte(`{"spooled":true}`),
		Usage: llm.Usage{InputTokens: 4, OutputTokens: 2}}
	at := T0.Add(5 * time.Minute)
	complete := func(id, token int64) error {
		return s.CompleteSpooled(ctx, jobstore.CompleteParams{ID: id, Token: token, Result: res, Now: at})
	}
	requireSucceeded := func(id int64) {
		t.Helper()
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateSucceeded, got.State)
		require.Equal(t, &res, got.Result)
		require.Equal(t, at, got.FinishedAt)
		require.Equal(t, 1, got.Attempts)
	}

	// The lease still holds: as Complete.
	held := insert(t, s, job("held", T0))
	c := claim(t, s, "held", 1, T0)[0]
	require.NoError(t, complete(held.ID, c.Lease.Token))
	requireSucceeded(held.ID)
	// Replayed again (a crash between the write and the spool file's
	// removal): the job is finished, nothing changes.
	require.ErrorIs(t, complete(held.ID, c.Lease.Token), jobstore.ErrConflict)
	requireSucceeded(held.ID)

	// The rescuer requeued the job while the store could not hear the
	// worker's heartbeats: the answer is kept.
	rescued := insert(t, s, job("rescued", T0))
	c = claim(t, s, "rescued", 1, T0)[0]
	r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 1, r.Requeued)
	require.NoError(t, complete(rescued.ID, c.Lease.Token))
	requireSucceeded(rescued.ID)
	require.Empty(t, claim(t, s, "rescued", 1, at), "a completed job is not claimed again")

	// Claimed again by another worker meanwhile: completed, and that
	// worker's own write is fenced off.
	taken := insert(t, s, job("taken", T0))
	first := claim(t, s, "taken", 1, T0)[0]
	_, err = s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Minute)})
	require.NoError(t, err)
	second := claim(t, s, "taken", 1, T0.Add(2*time.Minute))[0]
	require.NoError(t, complete(taken.ID, first.Lease.Token))
	requireSucceeded(taken.ID)
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: taken.ID, Token: second.Lease.Token, Result: jobstore.Result{Status: 200}, Now: at}),
		jobstore.ErrLeaseLost)

	// Finished meanwhile (canceled here): never overwritten.
	canceled := insert(t, s, job("canceled", T0))
	c = claim(t, s, "canceled", 1, T0)[0]
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: canceled.ID, Now: T0.Add(time.Second)})
	require.NoError(t, err)
	require.ErrorIs(t, complete(canceled.ID, c.Lease.Token), jobstore.ErrConflict)
	got, err := s.Get(ctx, canceled.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)

	require.ErrorIs(t, complete(424242, 1), jobstore.ErrNotFound)
}
