package jobstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testCountLive: CountLive counts queued, delayed and running jobs per
// upstream, whichever way they got there (insert, claim, handoff, retry,
// batch, pause), and nothing finished.
func testCountLive(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	count := func(now time.Time) []jobstore.LiveCount {
		t.Helper()
		got, err := s.CountLive(ctx, now)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, count(T0), "an empty store counts nothing")

	// a: two claimed, one handed off, three queued (one for later, one
	// past its deadline, which stays queued until the rescuer kills it).
	insert(t, s, job("a", T0))
	insert(t, s, job("a", T0))
	a := claim(t, s, "a", 2, T0)
	require.Len(t, a, 2)
	h := handoff(t, s, 1)
	h.Offer(1)
	insert(t, s, job("a", T0))
	received(t, h)
	a3 := insert(t, s, job("a", T0))
	later := job("a", T0)
	later.AvailableAt = T0.Add(time.Minute)
	insert(t, s, later)
	expiring := job("a", T0)
	expiring.Deadline = T0.Add(time.Second)
	insert(t, s, expiring)
	// b: one of each finished state, and one queued on a paused upstream.
	finish(t, s, "b", T0)
	insert(t, s, job("b", T0))
	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "b", Paused: true, Now: T0}))
	// c: one running, one retried with a backoff.
	insert(t, s, job("c", T0))
	insert(t, s, job("c", T0))
	c := claim(t, s, "c", 2, T0)
	require.Len(t, c, 2)
	st, err := s.Fail(ctx, jobstore.FailParams{ID: c[1].ID, Token: c[1].Lease.Token, Kind: jobstore.FailRetry,
		Error: jobstore.AttemptError{Status: 529, Kind: llm.Overload.String(), Message: "overloaded"}, RetryAt: T0.Add(10 * time.Minute), Now: T0})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, st)
	// z: a batch.
	var items []jobstore.InsertParams
	for _, id := range []string{"x", "y"} {
		p := job("z", T0)
		p.CustomID = id
		items = append(items, p)
	}
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: items, Now: T0})
	require.NoError(t, err)

	cases := []struct {
		name string
		now  time.Time
		want []jobstore.LiveCount
	}{
		{"now", T0, []jobstore.LiveCount{
			{Upstream: "a", Queued: 3, Delayed: 1, Running: 3},
			{Upstream: "b", Queued: 1},
			{Upstream: "c", Queued: 1, Delayed: 1, Running: 1},
			{Upstream: "z", Queued: 2},
		}},
		{"the scheduled job's time has come", T0.Add(time.Minute), []jobstore.LiveCount{
			{Upstream: "a", Queued: 3, Running: 3},
			{Upstream: "b", Queued: 1},
			{Upstream: "c", Queued: 1, Delayed: 1, Running: 1},
			{Upstream: "z", Queued: 2},
		}},
		{"every backoff is over", T0.Add(time.Hour), []jobstore.LiveCount{
			{Upstream: "a", Queued: 3, Running: 3},
			{Upstream: "b", Queued: 1},
			{Upstream: "c", Queued: 1, Running: 1},
			{Upstream: "z", Queued: 2},
		}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, count(tc.now), tc.name)
	}

	// Jobs leave the counts as they finish.
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: a[0].ID, Token: a[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: a3.ID, Now: T0})
	require.NoError(t, err)
	_, err = s.Fail(ctx, jobstore.FailParams{ID: c[0].ID, Token: c[0].Lease.Token, Kind: jobstore.FailTerminal,
		Error: jobstore.AttemptError{Status: 400, Kind: llm.ClientError.String(), Message: "bad"}, Now: T0})
	require.NoError(t, err)
	r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, jobstore.RescueResult{Expired: 1}, r, "the job past its deadline is dead")
	require.Equal(t, []jobstore.LiveCount{
		{Upstream: "a", Queued: 1, Running: 2},
		{Upstream: "b", Queued: 1},
		{Upstream: "c", Queued: 1},
		{Upstream: "z", Queued: 2},
	}, count(T0.Add(time.Hour)))
}
