package jobstoretest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

const batchHook = "https://example.com/batch-hook?token=secret"

// hookedBatch creates a batch of n jobs on upstream u with the batch
// webhook (each job with deadline, when set).
func hookedBatch(t *testing.T, s jobstore.Store, u string, n int, deadline time.Time) *jobstore.Batch {
	t.Helper()
	var jobs []jobstore.InsertParams
	for i := range n {
		p := job(u, T0)
		p.CustomID, p.Deadline = fmt.Sprintf("r%03d", i), deadline
		jobs = append(jobs, p)
	}
	b, err := s.CreateBatch(context.Background(), jobstore.CreateBatchParams{Format: llm.Anthropic, Upstream: u, Jobs: jobs,
		WebhookURL: batchHook, AllowEmpty: n == 0, Now: T0})
	require.NoError(t, err)
	require.Equal(t, batchHook, b.WebhookURL)
	return b
}

// deadBatch creates a batch on upstream u, with the batch webhook, of
// dead jobs refused before they ran (each with its errored result) and
// open ones.
func deadBatch(t *testing.T, s jobstore.Store, u string, dead, open int) *jobstore.Batch {
	t.Helper()
	var jobs []jobstore.InsertParams
	for i := range dead + open {
		p := job(u, T0)
		p.CustomID = fmt.Sprintf("r%03d", i)
		if i < dead {
			p.Dead = &jobstore.AttemptError{Status: 400, Message: "refused", At: T0}
			p.DeadResult = &jobstore.Result{Status: 400, Body: []byte(`{"type":"error"}`)}
		}
		jobs = append(jobs, p)
	}
	b, err := s.CreateBatch(context.Background(), jobstore.CreateBatchParams{Format: llm.Anthropic, Upstream: u, Jobs: jobs,
		WebhookURL: batchHook, Now: T0})
	require.NoError(t, err)
	return b
}

func batchDeliveries(t *testing.T, s jobstore.Store, id string) []*jobstore.WebhookDelivery {
	t.Helper()
	ds, err := s.BatchDeliveries(context.Background(), id)
	require.NoError(t, err)
	return ds
}

// completeAll claims and completes every queued job of upstream u at now.
func completeAll(t *testing.T, s jobstore.Store, u string, now time.Time) {
	t.Helper()
	for _, j := range claim(t, s, u, 1000, now) {
		require.NoError(t, s.Complete(context.Background(), jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token,
			Result: jobstore.Result{Status: 200}, Now: now}))
	}
}

// testBatchWebhooks: a batch with a webhook URL owes one delivery when its
// last job finishes, whatever the path that finishes it, with the event
// that says how it ended, dated by that finish; none before, none for a
// batch without a URL, a new one when it ends again after a retry; its
// deliveries stay out of its jobs' and go with the batch.
func testBatchWebhooks(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	t1 := T0.Add(time.Minute)
	cases := map[string]struct {
		end  func(t *testing.T, u string) (*jobstore.Batch, time.Time)
		want jobstore.BatchEvent
	}{
		"completed": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			b := hookedBatch(t, s, u, 3, time.Time{})
			c := claim(t, s, u, 3, T0)
			for i, j := range c {
				require.Empty(t, batchDeliveries(t, s, b.ID), "none while a job is open")
				st, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: j.Lease.Token, Kind: jobstore.FailTerminal,
					Error: jobstore.AttemptError{Status: 400, Message: "no"}, Now: t1.Add(time.Duration(i) * time.Second)})
				require.NoError(t, err)
				require.Equal(t, jobstore.StateDead, st)
			}
			return b, t1.Add(2 * time.Second)
		}, jobstore.BatchCompleted},
		"completed at once": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			b := hookedBatch(t, s, u, 3, time.Time{})
			completeAll(t, s, u, T0)
			return b, T0
		}, jobstore.BatchCompleted},
		"cancel": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			b := hookedBatch(t, s, u, 3, time.Time{})
			c := claim(t, s, u, 1, T0)
			require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))
			_, err := s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: b.ID, Now: t1})
			require.NoError(t, err)
			return b, t1
		}, jobstore.BatchCancelled},
		"expired": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			b := hookedBatch(t, s, u, 2, T0.Add(time.Hour))
			c := claim(t, s, u, 1, T0)
			require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))
			_, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Hour)})
			require.NoError(t, err)
			return b, T0.Add(2 * time.Hour)
		}, jobstore.BatchExpired},
		"every job dead from the start": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			return deadBatch(t, s, u, 2, 0), T0
		}, jobstore.BatchCompleted},
		"some jobs dead from the start": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			b := deadBatch(t, s, u, 1, 2)
			require.Empty(t, batchDeliveries(t, s, b.ID), "the open jobs are still to run")
			completeAll(t, s, u, t1)
			return b, t1
		}, jobstore.BatchCompleted},
		"failed": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			return hookedBatch(t, s, u, 0, time.Time{}), T0
		}, jobstore.BatchFailed},
		"router write-back": {func(t *testing.T, u string) (*jobstore.Batch, time.Time) {
			var jobs []jobstore.InsertParams
			for i := range 3 {
				p := job(u, T0)
				p.CustomID, p.Priority = fmt.Sprintf("r%d", i), llm.Low
				jobs = append(jobs, p)
			}
			b, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: jobs, WebhookURL: batchHook, Now: T0})
			require.NoError(t, err)
			res, err := s.CreateGroup(ctx, groupParams(u, T0))
			require.NoError(t, err)
			require.NotNil(t, res.Group)
			var lines []jobstore.GroupLine
			for _, j := range res.Jobs {
				lines = append(lines, jobstore.GroupLine{JobID: j.ID, Complete: &jobstore.Result{Status: 200}})
			}
			fr, err := s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: res.Group.ID, Token: res.Group.Lease.Token, Lines: lines, Now: t1})
			require.NoError(t, err)
			require.True(t, fr.Ended)
			return b, t1
		}, jobstore.BatchCompleted},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := "bw-" + name
			b, at := tc.end(t, u)
			ds := batchDeliveries(t, s, b.ID)
			require.Len(t, ds, 1)
			d := ds[0]
			require.Regexp(t, `^msg_[0-9a-f]{32}$`, d.ID)
			require.Equal(t, b.ID, d.BatchID)
			require.Zero(t, d.JobID)
			require.Equal(t, tc.want, d.BatchEvent)
			require.Empty(t, d.Event)
			require.Equal(t, jobstore.DeliveryPending, d.State)
			require.Equal(t, at, d.CreatedAt, "dated by the finish that ended the batch")
			require.Equal(t, at, d.NextAttemptAt, "due at once")
		})
	}

	t.Run("claimed with the batch's URL", func(t *testing.T) {
		// The cases above left their deliveries pending: each is claimed
		// once, with the batch's URL.
		got, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 100, LeaseFor: time.Minute, Now: T0.Add(3 * time.Hour)})
		require.NoError(t, err)
		require.Len(t, got, len(cases))
		for _, d := range got {
			require.NotEmpty(t, d.BatchID)
			require.Equal(t, batchHook, d.WebhookURL)
		}
		ds, err := s.Deliveries(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, ds, "a batch's deliveries are no job's")
	})

	t.Run("none without a URL", func(t *testing.T) {
		p := job("bw-plain", T0)
		p.CustomID = "a"
		b, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: []jobstore.InsertParams{p}, Now: T0})
		require.NoError(t, err)
		require.Empty(t, b.WebhookURL)
		completeAll(t, s, "bw-plain", T0)
		require.Empty(t, batchDeliveries(t, s, b.ID))
	})

	t.Run("ends again after a retry", func(t *testing.T) {
		u := "bw-retry"
		b := hookedBatch(t, s, u, 2, time.Time{})
		c := claim(t, s, u, 2, T0)
		require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))
		_, err := s.Fail(ctx, jobstore.FailParams{ID: c[1].ID, Token: c[1].Lease.Token, Kind: jobstore.FailTerminal, Error: jobstore.AttemptError{Message: "no"}, Now: T0})
		require.NoError(t, err)
		require.Len(t, batchDeliveries(t, s, b.ID), 1)
		n, err := s.Requeue(ctx, jobstore.RequeueParams{BatchID: b.ID, Now: t1})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Len(t, batchDeliveries(t, s, b.ID), 1, "reopened: nothing owed until it ends again")
		completeAll(t, s, u, t1)
		ds := batchDeliveries(t, s, b.ID)
		require.Len(t, ds, 2)
		require.NotEqual(t, ds[0].ID, ds[1].ID)
		require.Equal(t, t1, ds[1].CreatedAt)
	})

	t.Run("kept while pending, deleted with the batch", func(t *testing.T) {
		u := "bw-keep"
		b := hookedBatch(t, s, u, 1, time.Time{})
		completeAll(t, s, u, T0)
		_, err := s.DeleteFinished(ctx, jobstore.DeleteFinishedParams{State: jobstore.StateSucceeded, Before: T0.Add(time.Hour), Now: T0.Add(time.Hour)})
		require.NoError(t, err)
		got, err := s.GetBatch(ctx, b.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Counts.Succeeded, "the batch and its jobs stay while its webhook is pending")
		require.NoError(t, s.DeleteBatch(ctx, b.ID))
		require.Empty(t, batchDeliveries(t, s, b.ID))
	})
}

// testBatchWebhooksConcurrent: the last jobs of a batch finished at once
// by racing writers (each its own transaction) owe one delivery: never
// none, never two.
func testBatchWebhooksConcurrent(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	for round := range 5 {
		u := fmt.Sprintf("bwc%d", round)
		const n = 8
		b := hookedBatch(t, s, u, n, time.Time{})
		c := claim(t, s, u, n, T0)
		require.Len(t, c, n)
		var wg sync.WaitGroup
		for _, j := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each its own transaction (a failure is never grouped);
				// a deadlock the backend reports is retried, as the worker
				// retries a write the store could not take.
				for {
					_, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: j.Lease.Token, Kind: jobstore.FailTerminal,
						Error: jobstore.AttemptError{Message: "no"}, Now: T0})
					if !errors.Is(err, jobstore.ErrUnavailable) {
						if err != nil {
							t.Errorf("failing job %d: %v", j.ID, err)
						}
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Len(t, batchDeliveries(t, s, b.ID), 1, "round %d", round)
	}
}
