// Package jobstoretest is the conformance suite every jobstore.Store backend
// passes. A backend's test calls Run with a function that opens a fresh,
// empty store for one test (its own file or schema), so tests run in
// parallel.
package jobstoretest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// T0 is the suite's start time; tests move time by adding to it.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the whole suite against stores made by open. open must register
// the store's cleanup (Close, removing its file or schema) on t.
func Run(t *testing.T, open func(t *testing.T) jobstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s jobstore.Store)
	}{
		{"Lifecycle", testLifecycle},
		{"ClaimOrder", testClaimOrder},
		{"ClaimSkipsFutureAndExpired", testClaimSkips},
		{"Fencing", testFencing},
		{"FailKinds", testFailKinds},
		{"RecordAttempt", testRecordAttempt},
		{"Idempotency", testIdempotency},
		{"ConcurrentIdempotency", testConcurrentIdempotency},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"Rescue", testRescue},
		{"Retention", testRetention},
		{"Cancel", testCancel},
		{"Requeue", testRequeue},
		{"Pause", testPause},
		{"Batches", testBatches},
		{"Runs", testRuns},
		{"Pagination", testPagination},
		{"LongPayload", testLongPayload},
		{"Notify", testNotify},
		{"Validation", testValidation},
		{"Handoff", testHandoff},
		{"HandoffDeclines", testHandoffDeclines},
		{"HandoffConcurrent", testHandoffConcurrent},
		{"ConcurrentInserts", testConcurrentInserts},
		{"CountLive", testCountLive},
		{"Backlog", testBacklog},
		{"ClaimPriority", testClaimPriority},
		{"HandBackUnrecorded", testHandBackUnrecorded},
		{"OutboxEveryFinish", testOutboxEveryFinish},
		{"OutboxLease", testOutboxLease},
		{"OutboxRedeliver", testOutboxRedeliver},
		{"OutboxRetention", testOutboxRetention},
		{"OutboxConcurrentClaimers", testOutboxConcurrentClaimers},
		{"BatchWebhooks", testBatchWebhooks},
		{"BatchWebhooksConcurrent", testBatchWebhooksConcurrent},
		{"CompleteSpooled", testCompleteSpooled},
		{"Ownership", testOwnership},
		{"Spend", testSpend},
		{"SpendHolds", testSpendHolds},
		{"ProviderBatches", testProviderBatches},
		{"BatchDeadJobs", testBatchDeadJobs},
		{"BatchKeep", testBatchKeep},
		{"Files", testFiles},
		{"Clients", testClients},
		{"ResponseKeys", testResponseKeys},
		{"ProviderGroups", testProviderGroups},
		{"ProviderGroupsConcurrent", testProviderGroupsConcurrent},
		{"ProviderGroupsPath", testProviderGroupsPath},
		{"ProviderGroupsLineBytes", testProviderGroupsLineBytes},
		{"ProviderGroupsFail", testProviderGroupsFail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func job(upstream string, now time.Time) jobstore.InsertParams {
	return jobstore.InsertParams{Upstream: upstream, Priority: llm.Normal, Client: "c1", Path: "/v1/messages",
		Body: []byte(`{"model":"m","max_tokens":10}`), MaxAttempts: 3, Now: now}
}

func insert(t *testing.T, s jobstore.Store, p jobstore.InsertParams) *jobstore.Job {
	t.Helper()
	r, err := s.Insert(context.Background(), p)
	require.NoError(t, err)
	require.False(t, r.Existing)
	return r.Job
}

func claim(t *testing.T, s jobstore.Store, upstream string, n int, now time.Time) []*jobstore.Job {
	t.Helper()
	jobs, err := s.Claim(context.Background(), jobstore.ClaimParams{Upstream: upstream, Limit: n, Owner: "w1", LeaseFor: time.Minute, Now: now})
	require.NoError(t, err)
	return jobs
}

func ids(jobs []*jobstore.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func testLifecycle(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	p := job("a", T0)
	p.Deadline = T0.Add(time.Hour)
	p.WebhookURL = "https://example.com/hook"
	j := insert(t, s, p)
	require.Positive(t, j.ID)
	require.Equal(t, jobstore.StateQueued, j.State)
	require.Equal(t, T0, j.AvailableAt)
	require.Equal(t, T0.Add(time.Hour), j.Deadline)
	require.Equal(t, p.Body, j.Body)
	require.Equal(t, "https://example.com/hook", j.WebhookURL)

	got := claim(t, s, "a", 10, T0.Add(time.Second))
	require.Len(t, got, 1)
	c := got[0]
	require.Equal(t, jobstore.StateRunning, c.State)
	require.Equal(t, "w1", c.Lease.Owner)
	require.Equal(t, T0.Add(time.Second+time.Minute), c.Lease.ExpiresAt)
	require.Empty(t, claim(t, s, "a", 10, T0.Add(2*time.Second)), "a running job is not claimed twice")

	require.NoError(t, s.Heartbeat(ctx, jobstore.HeartbeatParams{ID: c.ID, Token: c.Lease.Token, LeaseFor: time.Minute, Now: T0.Add(30 * time.Second)}))
	j2, err := s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, T0.Add(90*time.Second), j2.Lease.ExpiresAt)

	res := jobstore.Result{Status: 200, Header: http.Header{"Request-Id": {"req_1"}}, Body: []byte(`{"ok":true}`),
		Usage: llm.Usage{InputTokens: 10, OutputTokens: 5, CacheCreationInputTokens: 2, CacheReadInputTokens: 3}}
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c.ID, Token: c.Lease.Token, Result: res, Now: T0.Add(time.Minute)}))
	done, err := s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, done.State)
	require.Equal(t, 1, done.Attempts)
	require.Equal(t, T0.Add(time.Minute), done.FinishedAt)
	require.Equal(t, &res, done.Result)

	_, err = s.Get(ctx, 999999)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testClaimOrder(t *testing.T, s jobstore.Store) {
	// Inserted out of order: the claim order is priority, then
	// available_at, then id.
	mk := func(p llm.Priority, avail time.Duration) *jobstore.Job {
		q := job("a", T0)
		q.Priority, q.AvailableAt = p, T0.Add(avail)
		q.Body = fmt.Appendf(nil, `{"model":"m","max_tokens":10,"n":%q}`, p.String()+avail.String())
		return insert(t, s, q)
	}
	low := mk(llm.Low, 0)
	normLate := mk(llm.Normal, 2*time.Second)
	normEarly := mk(llm.Normal, time.Second)
	normEarly2 := mk(llm.Normal, time.Second)
	crit := mk(llm.Critical, 3*time.Second)
	insert(t, s, job("other", T0))

	got := claim(t, s, "a", 3, T0.Add(time.Hour))
	require.Equal(t, []int64{crit.ID, normEarly.ID, normEarly2.ID}, ids(got))
	for i, want := range []*jobstore.Job{crit, normEarly, normEarly2} {
		require.Equal(t, string(want.Body), string(got[i].Body), "each claimed job keeps its own body")
	}
	got[0].Body[0] = 'X' // a body shared between jobs would show in the others
	require.Equal(t, byte('{'), got[1].Body[0])
	require.Equal(t, byte('{'), got[2].Body[0])
	got = claim(t, s, "a", 10, T0.Add(time.Hour))
	require.Equal(t, []int64{normLate.ID, low.ID}, ids(got))
	got = claim(t, s, "", 10, T0.Add(time.Hour))
	require.Len(t, got, 1)
	require.Equal(t, "other", got[0].Upstream)
}

func testClaimSkips(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	future := job("a", T0)
	future.AvailableAt = T0.Add(time.Minute)
	f := insert(t, s, future)
	expired := job("a", T0)
	expired.Deadline = T0.Add(time.Second)
	insert(t, s, expired)

	require.Empty(t, claim(t, s, "a", 10, T0.Add(2*time.Second)))
	at, ok, err := s.NextAvailable(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, T0, at, "the expired job is still queued until the rescuer kills it")
	_, ok, err = s.NextAvailable(ctx, "nobody")
	require.NoError(t, err)
	require.False(t, ok)

	got := claim(t, s, "a", 10, T0.Add(time.Minute))
	require.Equal(t, []int64{f.ID}, ids(got))
}

func testFencing(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	j := insert(t, s, job("a", T0))
	first := claim(t, s, "a", 1, T0)[0]
	// The lease expires, the rescuer takes the job back, another worker
	// claims it: the first worker's token is dead everywhere.
	r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 3, Now: T0.Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 1, r.Requeued)
	second := claim(t, s, "a", 1, T0.Add(2*time.Minute))[0]
	require.Equal(t, j.ID, second.ID)
	require.Greater(t, second.Lease.Token, first.Lease.Token)

	old := first.Lease.Token
	require.ErrorIs(t, s.Heartbeat(ctx, jobstore.HeartbeatParams{ID: j.ID, Token: old, LeaseFor: time.Minute, Now: T0.Add(3 * time.Minute)}), jobstore.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: old, Result: jobstore.Result{Status: 200}, Now: T0.Add(3 * time.Minute)}), jobstore.ErrLeaseLost)
	_, err = s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: old, Kind: jobstore.FailTerminal, Now: T0.Add(3 * time.Minute)})
	require.ErrorIs(t, err, jobstore.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: 424242, Token: 1, Now: T0}), jobstore.ErrNotFound)

	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: second.Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0.Add(3 * time.Minute)}))
	// Completing twice is refused: the job is no longer running.
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: second.Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0.Add(3 * time.Minute)}), jobstore.ErrLeaseLost)
}

func testFailKinds(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	tests := []struct {
		name      string
		kind      jobstore.FailKind
		maxAtt    int
		deadline  time.Duration
		retryIn   time.Duration
		wantState jobstore.State
		wantAtt   int
	}{
		{"rate reschedules without burning", jobstore.FailReschedule, 1, 0, 10 * time.Second, jobstore.StateQueued, 0},
		{"transient burns and retries", jobstore.FailRetry, 2, 0, time.Second, jobstore.StateQueued, 1},
		{"transient on the last attempt dies", jobstore.FailRetry, 1, 0, time.Second, jobstore.StateDead, 1},
		{"terminal dies at once", jobstore.FailTerminal, 5, 0, 0, jobstore.StateDead, 1},
		{"retry past the deadline dies", jobstore.FailReschedule, 5, 5 * time.Second, 10 * time.Second, jobstore.StateDead, 0},
	}
	for _, tc := range tests {
		p := job("fk-"+tc.name, T0)
		p.MaxAttempts = tc.maxAtt
		if tc.deadline > 0 {
			p.Deadline = T0.Add(tc.deadline)
		}
		insert(t, s, p)
		c := claim(t, s, p.Upstream, 1, T0)[0]
		body := &jobstore.Result{Status: 400, Header: http.Header{}, Body: []byte(`{"type":"error"}`)}
		st, err := s.Fail(ctx, jobstore.FailParams{ID: c.ID, Token: c.Lease.Token, Kind: tc.kind, RetryAt: T0.Add(tc.retryIn),
			Error: jobstore.AttemptError{Status: 429, Kind: llm.Rate.String(), Message: "slow down", RetryAfter: 1500 * time.Millisecond}, Result: body, Now: T0})
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.wantState, st, tc.name)
		got, err := s.Get(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, tc.wantState, got.State, tc.name)
		require.Equal(t, tc.wantAtt, got.Attempts, tc.name)
		require.Len(t, got.Errors, 1, tc.name)
		require.Equal(t, jobstore.AttemptError{Attempt: 1, Status: 429, Kind: llm.Rate.String(), Message: "slow down", RetryAfter: 1500 * time.Millisecond, At: T0}, got.Errors[0], tc.name)
		if tc.wantState == jobstore.StateQueued {
			require.Equal(t, T0.Add(tc.retryIn), got.AvailableAt, tc.name)
			require.Nil(t, got.Result, tc.name)
			require.Empty(t, claim(t, s, p.Upstream, 1, T0.Add(tc.retryIn-time.Microsecond)), tc.name)
			require.Len(t, claim(t, s, p.Upstream, 1, T0.Add(tc.retryIn)), 1, tc.name)
		} else {
			require.Equal(t, body, got.Result, tc.name)
			require.Equal(t, T0, got.FinishedAt, tc.name)
		}
	}
}

func testIdempotency(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	p := job("a", T0)
	p.IdempotencyKey = "key-1"
	first := insert(t, s, p)
	p.Body = []byte(`{"different":true}`)
	again, err := s.Insert(ctx, p)
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, first.ID, again.Job.ID)
	require.Equal(t, first.Body, again.Job.Body)
	page, err := s.List(ctx, jobstore.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
}

func testConcurrentIdempotency(t *testing.T, s jobstore.Store) {
	const n = 16
	var wg sync.WaitGroup
	results := make([]jobstore.InsertResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			p := job("a", T0)
			p.IdempotencyKey = "same"
			results[i], errs[i] = s.Insert(context.Background(), p)
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, results[0].Job.ID, results[i].Job.ID)
		if !results[i].Existing {
			created++
		}
	}
	require.Equal(t, 1, created)
}

func testConcurrentClaimers(t *testing.T, s jobstore.Store) {
	const jobs, workers = 200, 8
	for range jobs {
		insert(t, s, job("a", T0))
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				got, err := s.Claim(context.Background(), jobstore.ClaimParams{Upstream: "a", Limit: 7, Owner: fmt.Sprint("w", w), LeaseFor: time.Minute, Now: T0})
				if err != nil || len(got) == 0 {
					require.NoError(t, err)
					return
				}
				mu.Lock()
				for _, j := range got {
					seen[j.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, jobs)
	for id, n := range seen {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
}

func testRescue(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	j := insert(t, s, job("a", T0))
	now := T0
	for stall := 1; stall <= 3; stall++ {
		c := claim(t, s, "a", 1, now)
		require.Len(t, c, 1)
		r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 2, Now: now.Add(time.Minute - time.Microsecond)})
		require.NoError(t, err)
		require.Equal(t, jobstore.RescueResult{}, r, "lease not yet expired")
		now = now.Add(time.Minute)
		r, err = s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 2, Now: now})
		require.NoError(t, err)
		got, err := s.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, stall, got.Stalls)
		require.Len(t, got.Errors, stall)
		if stall <= 2 {
			require.Equal(t, jobstore.RescueResult{Requeued: 1}, r)
			require.Equal(t, jobstore.StateQueued, got.State)
		} else {
			require.Equal(t, jobstore.RescueResult{Dead: 1}, r)
			require.Equal(t, jobstore.StateDead, got.State)
			require.Equal(t, now, got.FinishedAt)
		}
	}
	// Queued past the deadline: killed by the rescuer.
	p := job("b", T0)
	p.Deadline = T0.Add(time.Second)
	d := insert(t, s, p)
	r, err := s.Rescue(ctx, jobstore.RescueParams{MaxStalls: 2, Now: T0.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, jobstore.RescueResult{Expired: 1}, r)
	got, err := s.Get(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateDead, got.State)
}

// finish puts one job of upstream u in each finished state at time at.
func finish(t *testing.T, s jobstore.Store, u string, at time.Time) map[jobstore.State]int64 {
	ctx := context.Background()
	out := map[jobstore.State]int64{}
	insert(t, s, job(u, at))
	c := claim(t, s, u, 1, at)[0]
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c.ID, Token: c.Lease.Token, Result: jobstore.Result{Status: 200}, Now: at}))
	out[jobstore.StateSucceeded] = c.ID
	insert(t, s, job(u, at))
	c = claim(t, s, u, 1, at)[0]
	_, err := s.Fail(ctx, jobstore.FailParams{ID: c.ID, Token: c.Lease.Token, Kind: jobstore.FailTerminal, Now: at})
	require.NoError(t, err)
	out[jobstore.StateDead] = c.ID
	j := insert(t, s, job(u, at))
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: j.ID, Now: at})
	require.NoError(t, err)
	out[jobstore.StateCanceled] = j.ID
	return out
}

func testRetention(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	old := finish(t, s, "a", T0)
	recent := finish(t, s, "a", T0.Add(time.Hour))
	live := insert(t, s, job("a", T0))
	for st, id := range old {
		n, err := s.DeleteFinished(ctx, jobstore.DeleteFinishedParams{State: st, Before: T0.Add(time.Minute)})
		require.NoError(t, err)
		require.Equal(t, 1, n, st)
		_, err = s.Get(ctx, id)
		require.ErrorIs(t, err, jobstore.ErrNotFound)
		_, err = s.Get(ctx, recent[st])
		require.NoError(t, err)
	}
	_, err := s.Get(ctx, live.ID)
	require.NoError(t, err)
	_, err = s.DeleteFinished(ctx, jobstore.DeleteFinishedParams{State: jobstore.StateQueued, Before: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}

func testCancel(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	q := insert(t, s, job("a", T0))
	r, err := s.Cancel(ctx, jobstore.CancelParams{ID: q.ID, Now: T0})
	require.NoError(t, err)
	require.True(t, r.WasLive)
	require.False(t, r.WasRunning)
	require.Equal(t, jobstore.StateCanceled, r.Job.State)
	r, err = s.Cancel(ctx, jobstore.CancelParams{ID: q.ID, Now: T0})
	require.NoError(t, err, "canceling twice is a no-op")
	require.False(t, r.WasLive, "the second cancel changed nothing")
	require.False(t, r.WasRunning)

	insert(t, s, job("a", T0))
	c := claim(t, s, "a", 1, T0)[0]
	r, err = s.Cancel(ctx, jobstore.CancelParams{ID: c.ID, Now: T0})
	require.NoError(t, err)
	require.True(t, r.WasLive)
	require.True(t, r.WasRunning)
	require.ErrorIs(t, s.Complete(ctx, jobstore.CompleteParams{ID: c.ID, Token: c.Lease.Token, Now: T0}), jobstore.ErrLeaseLost)

	done := finish(t, s, "b", T0)
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: done[jobstore.StateSucceeded], Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: 987654, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testRequeue(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	a := finish(t, s, "a", T0)
	b := finish(t, s, "b", T0)
	n, err := s.Requeue(ctx, jobstore.RequeueParams{IDs: []int64{a[jobstore.StateDead]}, Now: T0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := s.Get(ctx, a[jobstore.StateDead])
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Zero(t, got.Attempts)
	require.Equal(t, T0.Add(time.Hour), got.AvailableAt)
	require.True(t, got.FinishedAt.IsZero())
	require.Len(t, got.Errors, 1, "history is kept")

	_, err = s.Requeue(ctx, jobstore.RequeueParams{IDs: []int64{a[jobstore.StateSucceeded]}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)
	_, err = s.Requeue(ctx, jobstore.RequeueParams{IDs: []int64{55555}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.Requeue(ctx, jobstore.RequeueParams{Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	finish(t, s, "b", T0)
	n, err = s.Requeue(ctx, jobstore.RequeueParams{Upstream: "b", Now: T0})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err = s.Get(ctx, b[jobstore.StateDead])
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	n, err = s.Requeue(ctx, jobstore.RequeueParams{All: true, Now: T0})
	require.NoError(t, err)
	require.Zero(t, n)
}

func testPause(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	insert(t, s, job("a", T0))
	bj := insert(t, s, job("b", T0))
	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: true, Now: T0}))
	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: true, Now: T0}), "pausing twice is fine")
	paused, err := s.PausedUpstreams(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, paused)
	require.Empty(t, claim(t, s, "a", 10, T0))
	require.Equal(t, []int64{bj.ID}, ids(claim(t, s, "", 10, T0)))
	require.NoError(t, s.SetPaused(ctx, jobstore.PauseParams{Upstream: "a", Paused: false, Now: T0}))
	require.Len(t, claim(t, s, "a", 10, T0), 1)
	paused, err = s.PausedUpstreams(ctx)
	require.NoError(t, err)
	require.Empty(t, paused)
}

func testBatches(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var items []jobstore.InsertParams
	for _, id := range []string{"c", "a", "b", "e", "d"} {
		p := job("a", T0)
		p.CustomID = id
		items = append(items, p)
	}
	b, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: items, Now: T0})
	require.NoError(t, err)
	require.NotEmpty(t, b.ID)
	require.Equal(t, 5, b.Total)

	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{ID: b.ID, Format: llm.Anthropic, Jobs: items[:1], Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)
	dup := []jobstore.InsertParams{items[0], items[0]}
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.OpenAI, Jobs: dup, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	c := claim(t, s, "a", 2, T0)
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: c[0].ID, Token: c[0].Lease.Token, Result: jobstore.Result{Status: 200}, Now: T0}))
	got, err := s.GetBatch(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.BatchCounts{Queued: 3, Running: 1, Succeeded: 1}, got.Counts)
	require.Equal(t, llm.Anthropic, got.Format)
	require.False(t, got.Ended())

	var order []string
	cursor := ""
	for {
		page, err := s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: b.ID, After: cursor, Limit: 2})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			order = append(order, j.CustomID)
			require.Equal(t, b.ID, j.BatchID)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, order)

	cr, err := s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: b.ID, Now: T0})
	require.NoError(t, err)
	require.Equal(t, 4, cr.Canceled)
	require.Equal(t, []int64{c[1].ID}, cr.Running)
	got, err = s.GetBatch(ctx, b.ID)
	require.NoError(t, err)
	require.True(t, got.Ended())
	require.Equal(t, jobstore.BatchCounts{Succeeded: 1, Canceled: 4}, got.Counts)

	_, err = s.GetBatch(ctx, "batch_missing")
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: "batch_missing"})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: "batch_missing", Now: T0})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
}

func testPagination(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var want []int64
	for i := range 25 {
		u := "a"
		if i%5 == 0 {
			u = "b"
		}
		j := insert(t, s, job(u, T0))
		if u == "a" {
			want = append(want, j.ID)
		}
	}
	var got []int64
	var after int64
	pages := 0
	for {
		page, err := s.List(ctx, jobstore.ListParams{Upstream: "a", State: jobstore.StateQueued, After: after, Limit: 7})
		require.NoError(t, err)
		got = append(got, ids(page.Jobs)...)
		pages++
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	// Newest first: the same jobs, the largest id first, paged alike.
	got, after, pages = nil, 0, 0
	for {
		page, err := s.List(ctx, jobstore.ListParams{Upstream: "a", State: jobstore.StateQueued, After: after, Limit: 7, NewestFirst: true})
		require.NoError(t, err)
		got = append(got, ids(page.Jobs)...)
		pages++
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	slices.Reverse(want)
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)
}

func testLongPayload(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	p := job("a", T0)
	p.Body = body
	j := insert(t, s, p)
	c := claim(t, s, "a", 1, T0)[0]
	require.Equal(t, body, c.Body)
	out := bytes.Repeat([]byte("z"), 2<<20)
	require.NoError(t, s.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: c.Lease.Token, Result: jobstore.Result{Status: 200, Body: out}, Now: T0}))
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, out, got.Result.Body)
}

func testNotify(t *testing.T, s jobstore.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	a := s.Notify(ctx, "a")
	anyUp := s.Notify(ctx, "")
	insert(t, s, job("a", T0))
	<-a
	<-anyUp
	insert(t, s, job("b", T0))
	<-anyUp
	cancel()
	for range a { // closed once ctx is done
	}
}

func testValidation(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	bad := []jobstore.InsertParams{
		{Path: "/v1/messages", MaxAttempts: 1, Now: T0},
		{Upstream: "a", MaxAttempts: 1, Now: T0},
		{Upstream: "a", Path: "/v1/messages", MaxAttempts: 0, Now: T0},
		{Upstream: "a", Path: "/v1/messages", MaxAttempts: 1, Priority: 9, Now: T0},
		{Upstream: "a", Path: "/v1/messages", MaxAttempts: 1},
	}
	for i, p := range bad {
		_, err := s.Insert(ctx, p)
		require.ErrorIs(t, err, jobstore.ErrInvalid, "case %d", i)
	}
	_, err := s.Claim(ctx, jobstore.ClaimParams{Limit: 0, LeaseFor: time.Second, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: "gemini", Jobs: []jobstore.InsertParams{job("a", T0)}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}
