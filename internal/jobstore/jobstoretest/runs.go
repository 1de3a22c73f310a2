package jobstoretest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testRuns: jobs inserted one by one with a RunID keep it and their
// CustomID (as inserted, read back, listed and met again by their
// idempotency key); List filters by run; CancelRun cancels the run's live
// jobs only (of one client, or of every client), names the running ones,
// fences their leases, writes their webhook deliveries, and answers
// ErrNotFound for a run with no job of that client.
func testRuns(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	runJob := func(upstream, client, run, custom string) jobstore.InsertParams {
		p := job(upstream, T0)
		p.Client, p.RunID, p.CustomID = client, run, custom
		p.IdempotencyKey = run + ":" + custom
		return p
	}
	l1 := insert(t, s, runJob("a", "c1", "run-a", "line-1"))
	require.Equal(t, "run-a", l1.RunID)
	require.Equal(t, "line-1", l1.CustomID)
	l2 := insert(t, s, runJob("a", "c1", "run-a", "line-2"))
	p3 := runJob("b", "c1", "run-a", "line-3")
	p3.WebhookURL = "https://example.com/hook"
	l3 := insert(t, s, p3)
	other := insert(t, s, runJob("a", "c2", "run-a", "line-1"))
	runB := insert(t, s, runJob("a", "c1", "run-b", "line-1"))
	plain := insert(t, s, job("a", T0))
	require.Empty(t, plain.RunID)

	got, err := s.Get(ctx, l2.ID)
	require.NoError(t, err)
	require.Equal(t, "run-a", got.RunID)
	require.Equal(t, "line-2", got.CustomID)
	again, err := s.Insert(ctx, runJob("a", "c1", "run-a", "line-2"))
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, l2.ID, again.Job.ID)
	require.Equal(t, "run-a", again.Job.RunID)
	require.Equal(t, "line-2", again.Job.CustomID)

	page, err := s.List(ctx, jobstore.ListParams{RunID: "run-a"})
	require.NoError(t, err)
	require.Equal(t, []int64{l1.ID, l2.ID, l3.ID, other.ID}, ids(page.Jobs))
	for _, j := range page.Jobs {
		require.Equal(t, "run-a", j.RunID)
	}
	page, err = s.List(ctx, jobstore.ListParams{RunID: "run-a", Client: "c1", NewestFirst: true})
	require.NoError(t, err)
	require.Equal(t, []int64{l3.ID, l2.ID, l1.ID}, ids(page.Jobs))

	// line-1 succeeds, line-2 runs, line-3 is queued.
	c := claim(t, s, "a", 2, T0)
	require.Equal(t, []int64{l1.ID, l2.ID}, ids(c))
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: l1.ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))

	res, err := s.CancelRun(ctx, jobstore.CancelRunParams{RunID: "run-a", Client: "c1", Now: T0.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1, "b": 1}, res.Canceled)
	require.Equal(t, 2, res.Total())
	require.Equal(t, []int64{l2.ID}, res.Running)
	for id, want := range map[int64]jobstore.State{l1.ID: jobstore.StateSucceeded, l2.ID: jobstore.StateCanceled, l3.ID: jobstore.StateCanceled,
		other.ID: jobstore.StateQueued, runB.ID: jobstore.StateQueued, plain.ID: jobstore.StateQueued} {
		j, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, j.State, "job %d (%s %s)", id, j.RunID, j.CustomID)
		if want == jobstore.StateCanceled {
			require.Equal(t, T0.Add(time.Second), j.FinishedAt)
		}
	}
	require.ErrorIs(t, s.Heartbeat(ctx, jobstore.HeartbeatParams{ID: l2.ID, Token: c[1].Lease.Token, LeaseFor: time.Minute, Now: T0.Add(time.Second)}),
		jobstore.ErrLeaseLost, "the cancel took the running job's lease")
	ds, err := s.Deliveries(ctx, l3.ID)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the canceled job's webhook is owed")
	require.Equal(t, jobstore.StateCanceled, ds[0].Event)

	// Every client's: the one job left; then nothing, and no error.
	res, err = s.CancelRun(ctx, jobstore.CancelRunParams{RunID: "run-a", Now: T0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"a": 1}, res.Canceled)
	require.Empty(t, res.Running)
	res, err = s.CancelRun(ctx, jobstore.CancelRunParams{RunID: "run-a", Now: T0.Add(3 * time.Second)})
	require.NoError(t, err)
	require.Zero(t, res.Total(), "a run whose jobs all finished cancels nothing")

	_, err = s.CancelRun(ctx, jobstore.CancelRunParams{RunID: "run-missing", Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.CancelRun(ctx, jobstore.CancelRunParams{RunID: "run-b", Client: "c2", Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound, "no job of that client in the run")
	_, err = s.CancelRun(ctx, jobstore.CancelRunParams{Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	long := job("a", T0)
	long.RunID = strings.Repeat("r", jobstore.MaxRunIDLen+1)
	_, err = s.Insert(ctx, long)
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	inBatch := job("a", T0)
	inBatch.CustomID, inBatch.RunID = "x", "run-a"
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: []jobstore.InsertParams{inBatch}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}
