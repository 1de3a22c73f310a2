package jobstoretest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

func handoff(t *testing.T, s jobstore.Store, capacity int) *jobstore.Handoff {
	t.Helper()
	h, err := s.Handoff(jobstore.HandoffParams{Upstream: "a", Owner: "local", LeaseFor: time.Minute, Capacity: capacity})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	return h
}

// received takes the job waiting on h, failing if there is none.
func received(t *testing.T, h *jobstore.Handoff) *jobstore.Job {
	t.Helper()
	select {
	case j := <-h.Jobs():
		return j
	default:
		t.Fatal("no job was handed off")
		return nil
	}
}

func testHandoff(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	h := handoff(t, s, 4)
	h.Offer(2)
	require.Equal(t, 0, h.Pending())

	// Offered slots take new jobs, leased, in the insert itself.
	a := insert(t, s, job("a", T0))
	require.Equal(t, jobstore.StateRunning, a.State)
	require.Equal(t, jobstore.Lease{Token: 1, Owner: "local", ExpiresAt: T0.Add(time.Minute)}, a.Lease)
	b := insert(t, s, job("a", T0))
	require.Equal(t, 2, h.Pending())
	ra := received(t, h)
	require.Equal(t, *a, *ra, "the worker gets the job as inserted")
	require.NotSame(t, a, ra, "a copy: the submitter and the worker never share one")
	require.Equal(t, b.ID, received(t, h).ID)
	require.Equal(t, 0, h.Pending())
	// Close hands back what was taken and not received.
	h2, err := s.Handoff(jobstore.HandoffParams{Upstream: "z", Owner: "local", LeaseFor: time.Minute, Capacity: 1})
	require.NoError(t, err)
	h2.Offer(1)
	z := insert(t, s, job("z", T0))
	left := h2.Close()
	require.Len(t, left, 1)
	require.Equal(t, z.ID, left[0].ID)

	got, err := s.Get(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateRunning, got.State)
	require.Equal(t, a.Lease, got.Lease)

	// The offer is used up: the next job queues, and only it is claimable.
	c := insert(t, s, job("a", T0))
	require.Equal(t, jobstore.StateQueued, c.State)
	require.Equal(t, []int64{c.ID}, ids(claim(t, s, "a", 10, T0)))

	// A handed-off job lives like a claimed one: heartbeat, complete, and
	// rescue with fencing once its lease expires.
	require.NoError(t, s.Heartbeat(ctx, jobstore.HeartbeatParams{ID: a.ID, Token: 1, LeaseFor: time.Minute, Now: T0}))
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: a.ID, Token: 1, Result: jobstore.Result{Status: 200}, Now: T0}))
	r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 3, r.Requeued, "b, c and z had expired leases")
	again := claim(t, s, "a", 10, T0.Add(2*time.Minute))
	require.Equal(t, []int64{b.ID, c.ID}, ids(again))
	require.Greater(t, again[0].Lease.Token, b.Lease.Token)
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: b.ID, Token: b.Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}), jobstore.ErrLeaseLost)
}

func testHandoffDeclines(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	h := handoff(t, s, 8)
	other, err := s.Handoff(jobstore.HandoffParams{Upstream: "b", Owner: "other", LeaseFor: time.Minute, Capacity: 1})
	require.NoError(t, err)
	defer other.Close()
	h.Offer(8)
	queued := func(p jobstore.InsertParams) {
		t.Helper()
		r, err := s.Insert(ctx, p)
		require.NoError(t, err)
		require.Equal(t, jobstore.StateQueued, r.Job.State)
		require.Equal(t, 0, h.Pending(), "no slot stays reserved")
	}

	later := job("a", T0)
	later.AvailableAt = T0.Add(time.Minute)
	queued(later) // not available yet
	queued(job("b", T0))

	keyed := job("a", T0)
	keyed.IdempotencyKey = "k1"
	first := insert(t, s, keyed)
	require.Equal(t, first.ID, received(t, h).ID)
	r, err := s.Insert(ctx, keyed)
	require.NoError(t, err)
	require.True(t, r.Existing)
	require.Equal(t, 0, h.Pending(), "an existing job is never handed off")

	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: true, Now: T0}))
	queued(job("a", T0))
	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: false, Now: T0}))

	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: []jobstore.InsertParams{{Upstream: "a", Path: "/v1/messages",
		Body: []byte(`{}`), MaxAttempts: 1, CustomID: "x", Now: T0}}, Now: T0})
	require.NoError(t, err)
	require.Equal(t, 0, h.Pending(), "batch jobs queue")

	h.Offer(3)
	insert(t, s, job("a", T0))
	require.Equal(t, 2, h.Withdraw(1), "held: one slot still offered, one taken and not yet received")
	require.Equal(t, 1, h.Offered())
	received(t, h)
	require.Equal(t, 1, h.Withdraw(0))
	require.Equal(t, 0, h.Withdraw(-1), "withdrawing everything")
	queued(job("a", T0))
	h.Offer(1)
	require.Empty(t, h.Close())
	queued(job("a", T0))
	require.Len(t, claim(t, s, "a", 10, T0.Add(time.Minute)), 5, "the later, paused, batch, withdrawn and closed jobs")

	for _, p := range []jobstore.HandoffParams{{Owner: "x", LeaseFor: time.Minute, Capacity: 1},
		{Upstream: "a", Capacity: 1}, {Upstream: "a", LeaseFor: time.Minute}} {
		_, err := s.Handoff(p)
		require.ErrorIs(t, err, jobstore.ErrInvalid, fmt.Sprintf("%+v", p))
	}
}

// testHandoffConcurrent: concurrent inserts fill exactly the offered slots;
// every other job queues, and no job is both handed off and claimable.
func testHandoffConcurrent(t *testing.T, s jobstore.Store) {
	const n, offered = 60, 7
	h := handoff(t, s, 10)
	h.Offer(100) // capped at the capacity
	h.Offer(offered)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { insert(t, s, job("a", T0)) })
	}
	wg.Wait()
	require.Equal(t, offered, h.Pending())
	seen := map[int64]bool{}
	for range offered {
		seen[received(t, h).ID] = true
	}
	claimed := claim(t, s, "a", 100, T0)
	require.Len(t, claimed, n-offered)
	for _, j := range claimed {
		require.False(t, seen[j.ID], "job %d handed off and claimed", j.ID)
	}
}

// testConcurrentInserts: inserts that share a group commit each get back
// their own job, whatever statement the group used (with and without keys).
func testConcurrentInserts(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 128 {
		wg.Go(func() {
			p := job("a", T0)
			p.Client = fmt.Sprint("client-", i)
			if i >= 64 && i%8 == 0 { // groups with keys take another statement
				p.IdempotencyKey = fmt.Sprint("key-", i)
			}
			r, err := s.Insert(ctx, p)
			if !assert.NoError(t, err) {
				return
			}
			got, err := s.Get(ctx, r.Job.ID)
			if assert.NoError(t, err) {
				assert.Equal(t, p.Client, got.Client, "job %d", r.Job.ID)
				assert.Equal(t, p.Client, r.Job.Client)
			}
		})
		if i == 63 {
			wg.Wait()
		}
	}
	wg.Wait()
}
