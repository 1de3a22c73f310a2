package jobstoretest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// hooked is a job with a webhook URL.
func hooked(upstream string, now time.Time) jobstore.InsertParams {
	p := job(upstream, now)
	p.WebhookURL = "https://example.com/hook?token=secret"
	return p
}

func deliveries(t *testing.T, s jobstore.Store, id int64) []*jobstore.WebhookDelivery {
	t.Helper()
	ds, err := s.Deliveries(context.Background(), id)
	require.NoError(t, err)
	return ds
}

// testOutboxEveryFinish: every path that finishes a job with a webhook URL
// writes exactly one pending delivery, due at once, dated by the finish;
// a job without a URL, or one requeued, or canceled twice, writes none more.
func testOutboxEveryFinish(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	t1 := T0.Add(time.Second)
	finish := map[string]func(t *testing.T) (int64, jobstore.State){
		"complete": func(t *testing.T) (int64, jobstore.State) {
			j := insert(t, s, hooked("complete", T0))
			c := claim(t, s, "complete", 1, T0)[0]
			require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: c.Lease.Token, Result: jobstore.Result{Status: 200}, Now: t1}))
			return j.ID, jobstore.StateSucceeded
		},
		"fail terminal": func(t *testing.T) (int64, jobstore.State) {
			j := insert(t, s, hooked("terminal", T0))
			c := claim(t, s, "terminal", 1, T0)[0]
			st, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: c.Lease.Token, Kind: jobstore.FailTerminal, Error: jobstore.AttemptError{Message: "no"}, Now: t1})
			require.NoError(t, err)
			require.Equal(t, jobstore.StateDead, st)
			return j.ID, jobstore.StateDead
		},
		"cancel": func(t *testing.T) (int64, jobstore.State) {
			j := insert(t, s, hooked("cancel", T0))
			_, err := s.Cancel(ctx, jobstore.CancelParams{ID: j.ID, Now: t1})
			require.NoError(t, err)
			_, err = s.Cancel(ctx, jobstore.CancelParams{ID: j.ID, Now: t1.Add(time.Second)})
			require.NoError(t, err, "canceling a canceled job is a no-op")
			return j.ID, jobstore.StateCanceled
		},
		"rescue kill": func(t *testing.T) (int64, jobstore.State) {
			p := hooked("stall", T0)
			j := insert(t, s, p)
			claim(t, s, "stall", 1, T0) // lease ends at T0+1m
			res, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 0, Now: T0.Add(time.Minute)})
			require.NoError(t, err)
			require.GreaterOrEqual(t, res.Dead, 1)
			return j.ID, jobstore.StateDead
		},
		"deadline": func(t *testing.T) (int64, jobstore.State) {
			p := hooked("deadline", T0)
			p.Deadline = T0.Add(time.Millisecond)
			p.AvailableAt = T0.Add(time.Hour)
			j := insert(t, s, p)
			_, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 2, Now: T0.Add(time.Second)})
			require.NoError(t, err)
			return j.ID, jobstore.StateDead
		},
	}
	for name, fn := range finish {
		t.Run(name, func(t *testing.T) {
			id, st := fn(t)
			j, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, st, j.State)
			ds := deliveries(t, s, id)
			require.Len(t, ds, 1, "one delivery per finish")
			d := ds[0]
			require.True(t, strings.HasPrefix(d.ID, "msg_") && len(d.ID) == 36, "id %q", d.ID)
			require.Equal(t, id, d.JobID)
			require.Equal(t, st, d.Event)
			require.Equal(t, jobstore.DeliveryPending, d.State)
			require.Equal(t, j.FinishedAt, d.CreatedAt, "the event time is the finish")
			require.Equal(t, j.FinishedAt, d.NextAttemptAt, "due at once")
			require.Equal(t, j.FinishedAt, d.RetryFrom)
			require.Zero(t, d.Attempts)
		})
	}

	t.Run("batch cancel", func(t *testing.T) {
		items := make([]jobstore.InsertParams, 3)
		for i := range items {
			items[i] = hooked("batch", T0)
			items[i].CustomID = fmt.Sprint("r", i)
		}
		items[2].WebhookURL = ""
		b, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: items, Now: T0})
		require.NoError(t, err)
		_, err = s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: b.ID, Now: t1})
		require.NoError(t, err)
		page, err := s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: b.ID})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			want := 1
			if j.WebhookURL == "" {
				want = 0
			}
			require.Len(t, deliveries(t, s, j.ID), want, "job %s", j.CustomID)
		}
	})

	t.Run("no url, retry requeue", func(t *testing.T) {
		plain := insert(t, s, job("plain", T0))
		c := claim(t, s, "plain", 1, T0)[0]
		require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: plain.ID, Token: c.Lease.Token, Now: t1}))
		require.Empty(t, deliveries(t, s, plain.ID))

		j := insert(t, s, hooked("retry", T0))
		c = claim(t, s, "retry", 1, T0)[0]
		st, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: c.Lease.Token, Kind: jobstore.FailRetry, Error: jobstore.AttemptError{Message: "again"}, Now: t1})
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, st)
		require.Empty(t, deliveries(t, s, j.ID), "a requeued job owes nothing yet")
		require.Error(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: c.Lease.Token, Now: t1}), "a stale completion writes nothing")
		require.Empty(t, deliveries(t, s, j.ID))
	})

	t.Run("requeued dead job finishes again", func(t *testing.T) {
		j := insert(t, s, hooked("again", T0))
		c := claim(t, s, "again", 1, T0)[0]
		_, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: c.Lease.Token, Kind: jobstore.FailTerminal, Now: t1})
		require.NoError(t, err)
		n, err := s.Requeue(ctx, jobstore.RequeueParams{IDs: []int64{j.ID}, Now: t1})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		c = claim(t, s, "again", 1, t1)[0]
		require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: c.Lease.Token, Now: t1.Add(time.Second)}))
		ds := deliveries(t, s, j.ID)
		require.Len(t, ds, 2)
		require.NotEqual(t, ds[0].ID, ds[1].ID)
		require.Equal(t, []jobstore.State{jobstore.StateDead, jobstore.StateSucceeded}, []jobstore.State{ds[0].Event, ds[1].Event})
	})
}

// finishHooked inserts and cancels n jobs with a webhook URL at T0.
func finishHooked(t *testing.T, s jobstore.Store, upstream string, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		j := insert(t, s, hooked(upstream, T0))
		_, err := s.Cancel(context.Background(), jobstore.CancelParams{ID: j.ID, Now: T0})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	return ids
}

// testOutboxLease: a claim leases a due delivery until LeaseFor passes;
// results are fenced by the claim's token; failed and delivered rows are
// never claimed; the stats count pending rows.
func testOutboxLease(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	ids := finishHooked(t, s, "a", 3)
	st, err := s.DeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, jobstore.DeliveryStats{Pending: 3, OldestPending: T0}, st)

	lease := 30 * time.Second
	got, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 2, LeaseFor: lease, Now: T0})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, d := range got {
		require.Equal(t, "https://example.com/hook?token=secret", d.WebhookURL)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, T0.Add(lease), d.NextAttemptAt)
	}
	rest, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 10, LeaseFor: lease, Now: T0.Add(time.Second)})
	require.NoError(t, err)
	require.Len(t, rest, 1, "leased deliveries are not claimed again")
	require.NotContains(t, []string{got[0].ID, got[1].ID}, rest[0].ID)

	// Delivered, and retried later.
	require.NoError(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: got[0].ID, Token: got[0].Token, State: jobstore.DeliveryDelivered, Status: 204, Now: T0.Add(2 * time.Second)}))
	require.ErrorIs(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: got[0].ID, Token: got[0].Token, State: jobstore.DeliveryDelivered, Status: 204, Now: T0.Add(2 * time.Second)}),
		jobstore.ErrLeaseLost, "a finished delivery takes no second result")
	retryAt := T0.Add(10 * time.Second)
	require.NoError(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: got[1].ID, Token: got[1].Token, State: jobstore.DeliveryPending, Status: 503,
		Error: "receiver answered 503", NextAttemptAt: retryAt, Now: T0.Add(2 * time.Second)}))
	require.ErrorIs(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: "msg_none", State: jobstore.DeliveryDelivered, Now: T0}), jobstore.ErrNotFound)

	// The third one's claimer died: due again when its lease ends.
	again, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 10, LeaseFor: lease, Now: retryAt})
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, got[1].ID, again[0].ID)
	require.Equal(t, 2, again[0].Attempts)
	require.Greater(t, again[0].Token, got[1].Token)
	require.ErrorIs(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: got[1].ID, Token: got[1].Token, State: jobstore.DeliveryDelivered, Now: retryAt}),
		jobstore.ErrLeaseLost, "the previous claim's token is stale")
	expired, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 10, LeaseFor: lease, Now: T0.Add(time.Second + lease)})
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, rest[0].ID, expired[0].ID)
	require.NoError(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: again[0].ID, Token: again[0].Token, State: jobstore.DeliveryFailed, Status: 0,
		Error: "connection refused", Now: retryAt}))

	byID := map[string]*jobstore.WebhookDelivery{}
	for _, id := range ids {
		for _, d := range deliveries(t, s, id) {
			byID[d.ID] = d
		}
	}
	d0, d1 := byID[got[0].ID], byID[got[1].ID]
	require.Equal(t, jobstore.DeliveryDelivered, d0.State)
	require.Equal(t, 204, d0.LastStatus)
	require.Zero(t, d0.NextAttemptAt)
	require.Equal(t, T0.Add(2*time.Second), d0.FinishedAt)
	require.Equal(t, jobstore.DeliveryFailed, d1.State)
	require.Equal(t, "connection refused", d1.LastError)

	none, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 10, LeaseFor: lease, Now: T0.Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, none, 1, "only the one whose lease ended again; delivered and failed rows never")
	st, err = s.DeliveryStats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Pending)

	_, err = s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 0, LeaseFor: lease, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	require.ErrorIs(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: "x", State: jobstore.DeliveryPending, Now: T0}), jobstore.ErrInvalid)
}

// testOutboxRedeliver: redeliver makes the latest delivery pending and due
// at once with the same id, and fences out an attempt in flight.
func testOutboxRedeliver(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	id := finishHooked(t, s, "a", 1)[0]
	got, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 1, LeaseFor: time.Minute, Now: T0})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: got[0].ID, Token: got[0].Token, State: jobstore.DeliveryDelivered, Status: 200, Now: T0}))

	t1 := T0.Add(time.Hour)
	d, err := s.Redeliver(ctx, jobstore.RedeliverParams{JobID: id, Now: t1})
	require.NoError(t, err)
	require.Equal(t, got[0].ID, d.ID, "the same delivery id")
	require.Equal(t, jobstore.DeliveryPending, d.State)
	require.Equal(t, t1, d.NextAttemptAt)
	require.Equal(t, t1, d.RetryFrom)
	require.Equal(t, T0, d.CreatedAt, "the event time stays")
	require.Zero(t, d.FinishedAt)

	again, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 1, LeaseFor: time.Minute, Now: t1})
	require.NoError(t, err)
	require.Len(t, again, 1)
	_, err = s.Redeliver(ctx, jobstore.RedeliverParams{JobID: id, Now: t1})
	require.NoError(t, err)
	require.ErrorIs(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: d.ID, Token: again[0].Token, State: jobstore.DeliveryDelivered, Now: t1}),
		jobstore.ErrLeaseLost, "redeliver fences the attempt in flight")

	plain := insert(t, s, job("a", T0))
	_, err = s.Redeliver(ctx, jobstore.RedeliverParams{JobID: plain.ID, Now: t1})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.Redeliver(ctx, jobstore.RedeliverParams{JobID: 1 << 40, Now: t1})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

// testOutboxRetention: the cleaner keeps a finished job while its delivery
// is pending, and deletes its deliveries with it.
func testOutboxRetention(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	ids := finishHooked(t, s, "a", 2)
	got, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 2, LeaseFor: time.Minute, Now: T0})
	require.NoError(t, err)
	require.Len(t, got, 2)
	done := got[0]
	require.NoError(t, s.RecordDelivery(ctx, jobstore.RecordDeliveryParams{ID: done.ID, Token: done.Token, State: jobstore.DeliveryDelivered, Now: T0}))
	n, err := s.DeleteFinished(ctx, jobstore.DeleteFinishedParams{State: jobstore.StateCanceled, Before: T0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the job whose webhook is pending stays")
	for _, id := range ids {
		ds := deliveries(t, s, id)
		if _, err := s.Get(ctx, id); err != nil {
			require.ErrorIs(t, err, jobstore.ErrNotFound)
			require.Empty(t, ds, "deliveries go with their job")
		} else {
			require.Len(t, ds, 1)
			require.Equal(t, jobstore.DeliveryPending, ds[0].State)
		}
	}
}

// testOutboxConcurrentClaimers: claimers racing on one store never hold the
// same delivery at once, and every delivery is claimed exactly once.
func testOutboxConcurrentClaimers(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	const n = 40
	finishHooked(t, s, "a", n)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{Limit: 3, LeaseFor: time.Hour, Now: T0})
				if err != nil {
					t.Errorf("claimer %d: %v", w, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					seen[d.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, "delivery %s claimed %d times", id, c)
	}
}
