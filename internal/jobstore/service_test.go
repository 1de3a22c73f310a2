package jobstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

func seedJob(t *testing.T, s jobstore.Store, now time.Time) *jobstore.Job {
	t.Helper()
	r, err := s.Insert(context.Background(), jobstore.InsertParams{Upstream: "a", Path: "/v1/messages", MaxAttempts: 3, Now: now})
	require.NoError(t, err)
	return r.Job
}

func TestJobRescuerOnFakeClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLite(t)
	fc := clock.NewFake(jobstoretest.T0)
	j := seedJob(t, s, fc.Now())
	_, err := s.Claim(ctx, jobstore.ClaimParams{Limit: 1, LeaseFor: 45 * time.Second, Now: fc.Now()})
	require.NoError(t, err)

	passes := make(chan jobstore.RescueResult, 4)
	newRescuer := func() *jobstore.JobRescuer {
		r, err := jobstore.NewJobRescuer(s, jobstore.JobRescuerConfig{Interval: 30 * time.Second, MaxStalls: 1, Clock: fc,
			OnPass: func(res jobstore.RescueResult, err error) { require.NoError(t, err); passes <- res }})
		require.NoError(t, err)
		return r
	}
	r := newRescuer()
	require.NoError(t, r.Stop(ctx), "Stop before Start is fine")
	require.ErrorIs(t, r.Start(ctx), lifecycle.ErrStopped, "and the rescuer never starts")
	r = newRescuer()
	require.NoError(t, r.Start(ctx))

	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(30 * time.Second)
	require.Equal(t, jobstore.RescueResult{}, <-passes, "lease still valid at 30s")
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(30 * time.Second)
	require.Equal(t, jobstore.RescueResult{Requeued: 1}, <-passes)

	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, 1, got.Stalls)
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx), "Stop is idempotent")
}

// TestJobCleanerOnFakeClock: passes on the fake clock delete the finished
// jobs past their state's retention and the expired response keys.
func TestJobCleanerOnFakeClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLite(t)
	fc := clock.NewFake(jobstoretest.T0)
	// One succeeded and one canceled job finish at T0.
	seedJob(t, s, fc.Now())
	c, err := s.Claim(ctx, jobstore.ClaimParams{Limit: 1, LeaseFor: time.Minute, Now: fc.Now()})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: fc.Now()}))
	canceled := seedJob(t, s, fc.Now())
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: canceled.ID, Now: fc.Now()})
	require.NoError(t, err)
	// Two stored Responses' keys: one the provider forgets after 90m, one
	// it keeps for a day.
	for id, ttl := range map[string]time.Duration{"resp_short": 90 * time.Minute, "resp_long": 24 * time.Hour} {
		require.NoError(t, s.PutResponseKey(ctx, jobstore.PutResponseKeyParams{ResponseKey: jobstore.ResponseKey{
			Upstream: "gpt", ID: id, Key: "aaaa1111", CreatedAt: fc.Now(), ExpiresAt: fc.Now().Add(ttl)}}))
	}

	passes := make(chan int, 4)
	cl, err := jobstore.NewJobCleaner(s, jobstore.JobCleanerConfig{Interval: time.Hour, SucceededRetention: 90 * time.Minute,
		CanceledRetention: -1, Clock: fc, OnPass: func(n int, err error) { require.NoError(t, err); passes <- n }})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(time.Hour)
	require.Equal(t, 0, <-passes)
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(time.Hour)
	require.Equal(t, 1, <-passes, "succeeded job past 90m retention; canceled kept forever")
	require.NoError(t, cl.Stop(ctx))

	_, err = s.Get(ctx, c[0].ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.Get(ctx, canceled.ID)
	require.NoError(t, err)
	_, err = s.GetResponseKey(ctx, jobstore.GetResponseKeyParams{Upstream: "gpt", ID: "resp_short", Now: jobstoretest.T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound, "the cleaner swept the expired response key")
	_, err = s.GetResponseKey(ctx, jobstore.GetResponseKeyParams{Upstream: "gpt", ID: "resp_long", Now: fc.Now()})
	require.NoError(t, err, "not the other")
}

func TestJobCleanerRunsOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLite(t)
	fc := clock.NewFake(jobstoretest.T0)
	var leading atomic.Bool
	passes := make(chan int, 4)
	cl, err := jobstore.NewJobCleaner(s, jobstore.JobCleanerConfig{Interval: time.Hour, Clock: fc, Leading: leading.Load,
		OnPass: func(n int, err error) { require.NoError(t, err); passes <- n }})
	require.NoError(t, err)
	require.NoError(t, cl.Start(ctx))
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(time.Hour) // not the leader: no pass
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	require.Empty(t, passes)
	leading.Store(true)
	fc.Advance(time.Hour)
	require.Equal(t, 0, <-passes)
	require.NoError(t, cl.Stop(ctx))
}

func TestServiceConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := jobstore.NewJobRescuer(nil, jobstore.JobRescuerConfig{MaxStalls: -1})
	require.ErrorContains(t, err, "MaxStalls")
	_, err = jobstore.NewJobCleaner(nil, jobstore.JobCleanerConfig{Interval: -time.Second})
	require.ErrorContains(t, err, "Interval")
	_, err = jobstore.Open(context.Background(), "sqlite:x.db", jobstore.Options{GroupCommitMax: -1})
	require.ErrorContains(t, err, "GroupCommitMax")
}
