package jobstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testRecordAttempt checks RecordAttempt: a failed attempt of a running
// job joins its history (numbered, timed, naming its upstream) and burns,
// while the job stays running under the same lease, whose token still
// completes it; a stale token, an unknown job and an attempt that would
// be the job's last are refused without a change.
func testRecordAttempt(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	p := job("ra", T0)
	p.MaxAttempts = 2
	j := insert(t, s, p)
	c := claim(t, s, "ra", 1, T0)[0]
	at := T0.Add(time.Second)
	e := jobstore.AttemptError{Status: 529, Kind: llm.Overload.String(), Message: "Overloaded", Upstream: "primary"}
	require.NoError(t, s.RecordAttempt(ctx, jobstore.RecordAttemptParams{ID: j.ID, Token: c.Lease.Token, Error: e, Now: at}))

	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State, "the lease goes on")
	require.Equal(t, c.Lease, got.Lease)
	require.Equal(t, 1, got.Attempts)
	want := e
	want.Attempt, want.At = 1, at
	require.Equal(t, []jobstore.AttemptError{want}, got.Errors)

	// The attempt after it would be the job's last: refused, nothing changed.
	require.ErrorIs(t, s.RecordAttempt(ctx, jobstore.RecordAttemptParams{ID: j.ID, Token: c.Lease.Token, Error: e, Now: at}),
		jobstore.ErrConflict)
	require.ErrorIs(t, s.RecordAttempt(ctx, jobstore.RecordAttemptParams{ID: j.ID, Token: c.Lease.Token + 1, Error: e, Now: at}),
		jobstore.ErrLeaseLost)
	require.ErrorIs(t, s.RecordAttempt(ctx, jobstore.RecordAttemptParams{ID: 424242, Token: 1, Error: e, Now: at}), jobstore.ErrNotFound)
	got, err = s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts)
	require.Len(t, got.Errors, 1)

	// The same lease completes it: the fallback's attempt is the second.
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: c.Lease.Token, Result: jobstore.Result{Status: 200}, Now: at}))
	got, err = s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	require.Equal(t, 2, got.Attempts)
	require.Equal(t, []jobstore.AttemptError{want}, got.Errors)
}
