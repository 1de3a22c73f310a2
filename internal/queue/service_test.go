package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/queue/queuetest"
)

func seedJob(t *testing.T, s queue.Store, now time.Time) *queue.Job {
	t.Helper()
	r, err := s.Insert(context.Background(), queue.InsertParams{Upstream: "a", Path: "/v1/messages", MaxAttempts: 3, Now: now})
	require.NoError(t, err)
	return r.Job
}

func TestJobRescuerOnFakeClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLite(t)
	fc := clock.NewFake(queuetest.T0)
	j := seedJob(t, s, fc.Now())
	_, err := s.Claim(ctx, queue.ClaimParams{Limit: 1, LeaseFor: 45 * time.Second, Now: fc.Now()})
	require.NoError(t, err)

	passes := make(chan queue.RescueResult, 4)
	r, err := queue.NewJobRescuer(s, queue.JobRescuerConfig{Interval: 30 * time.Second, MaxStalls: 1, Clock: fc,
		OnPass: func(res queue.RescueResult, err error) { require.NoError(t, err); passes <- res }})
	require.NoError(t, err)
	require.NoError(t, r.Stop(ctx), "Stop before Start is fine")
	require.NoError(t, r.Start(ctx))

	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(30 * time.Second)
	require.Equal(t, queue.RescueResult{}, <-passes, "lease still valid at 30s")
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(30 * time.Second)
	require.Equal(t, queue.RescueResult{Requeued: 1}, <-passes)

	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, queue.StateQueued, got.State)
	require.Equal(t, 1, got.Stalls)
	require.NoError(t, r.Stop(ctx))
	require.NoError(t, r.Stop(ctx), "Stop is idempotent")
}

func TestJobCleanerOnFakeClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLite(t)
	fc := clock.NewFake(queuetest.T0)
	// One succeeded and one canceled job finish at T0.
	seedJob(t, s, fc.Now())
	c, err := s.Claim(ctx, queue.ClaimParams{Limit: 1, LeaseFor: time.Minute, Now: fc.Now()})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, queue.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: queue.Result{Status: 200}, Now: fc.Now()}))
	canceled := seedJob(t, s, fc.Now())
	_, err = s.Cancel(ctx, queue.CancelParams{ID: canceled.ID, Now: fc.Now()})
	require.NoError(t, err)

	passes := make(chan int, 4)
	cl, err := queue.NewJobCleaner(s, queue.JobCleanerConfig{Interval: time.Hour, SucceededRetention: 90 * time.Minute,
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
	require.ErrorIs(t, err, queue.ErrNotFound)
	_, err = s.Get(ctx, canceled.ID)
	require.NoError(t, err)
}

func TestServiceConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := queue.NewJobRescuer(nil, queue.JobRescuerConfig{MaxStalls: -1})
	require.ErrorContains(t, err, "MaxStalls")
	_, err = queue.NewJobCleaner(nil, queue.JobCleanerConfig{Interval: -time.Second})
	require.ErrorContains(t, err, "Interval")
	_, err = queue.Open(context.Background(), "sqlite:x.db", queue.Options{GroupCommitMax: -1})
	require.ErrorContains(t, err, "GroupCommitMax")
}
