package jobstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testBacklog: Backlog counts an upstream's available queued jobs per
// class, capped, and nothing of a paused upstream, of another upstream, of
// later jobs or of running ones.
func testBacklog(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	mk := func(u string, p llm.Priority, avail time.Duration) *jobstore.Job {
		q := job(u, T0)
		q.Priority, q.AvailableAt = p, T0.Add(avail)
		return insert(t, s, q)
	}
	for range 5 {
		mk("a", llm.Low, 0)
	}
	mk("a", llm.Critical, 0)
	mk("a", llm.Critical, time.Minute) // not yet available
	mk("a", llm.Normal, 0)
	mk("b", llm.High, 0) // another upstream

	got, err := s.Backlog(ctx, "a", T0, 3)
	require.NoError(t, err)
	require.Equal(t, [llm.NumPriorities]int{1, 0, 1, 3}, got, "low is capped at 3")
	got, err = s.Backlog(ctx, "a", T0.Add(time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, [llm.NumPriorities]int{2, 0, 1, 5}, got)

	// A running job is not backlog.
	c := claim(t, s, "a", 1, T0.Add(time.Minute))
	require.Len(t, c, 1)
	got, err = s.Backlog(ctx, "a", T0.Add(time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, [llm.NumPriorities]int{1, 0, 1, 5}, got)

	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: true, Now: T0}))
	got, err = s.Backlog(ctx, "a", T0.Add(time.Minute), 100)
	require.NoError(t, err)
	require.Equal(t, [llm.NumPriorities]int{}, got, "a paused upstream has no backlog")

	got, err = s.Backlog(ctx, "none", T0, 100)
	require.NoError(t, err)
	require.Equal(t, [llm.NumPriorities]int{}, got)
}

// testClaimPriority: a claim with Priority takes only jobs of that class,
// in available_at then id order, with or without an upstream.
func testClaimPriority(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	mk := func(u string, p llm.Priority) *jobstore.Job {
		q := job(u, T0)
		q.Priority = p
		return insert(t, s, q)
	}
	crit := mk("a", llm.Critical)
	low1 := mk("a", llm.Low)
	low2 := mk("a", llm.Low)
	lowB := mk("b", llm.Low)
	normal := mk("a", llm.Normal)

	byClass := func(u string, p llm.Priority, n int) []*jobstore.Job {
		jobs, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: u, Priority: &p, Limit: n, Owner: "w1", LeaseFor: time.Minute, Now: T0})
		require.NoError(t, err)
		return jobs
	}
	require.Equal(t, []int64{low1.ID, low2.ID}, ids(byClass("a", llm.Low, 5)), "only low jobs, though critical and normal wait")
	require.Empty(t, byClass("a", llm.High, 5))
	require.Equal(t, []int64{lowB.ID}, ids(byClass("", llm.Low, 5)))
	require.Equal(t, []int64{crit.ID, normal.ID}, ids(claim(t, s, "a", 5, T0)))

	bad := llm.Priority(9)
	_, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "a", Priority: &bad, Limit: 1, Owner: "w1", LeaseFor: time.Minute, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}

// testHandBackUnrecorded: a reschedule with an empty Error hands the job
// back (queued, no attempt burnt) without a history entry.
func testHandBackUnrecorded(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	insert(t, s, job("a", T0))
	c := claim(t, s, "a", 1, T0)[0]
	st, err := s.Fail(ctx, jobstore.FailParams{ID: c.ID, Token: c.Lease.Token, Kind: jobstore.FailReschedule, Now: T0})
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, st)
	got, err := s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Zero(t, got.Attempts)
	require.Empty(t, got.Errors)
	require.Equal(t, T0, got.AvailableAt)
}
