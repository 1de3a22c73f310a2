package jobstoretest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// groupParams is a CreateGroup of upstream u's low jobs at now.
func groupParams(u string, now time.Time) jobstore.CreateGroupParams {
	return jobstore.CreateGroupParams{Upstream: u, Classes: []llm.Priority{llm.Low}, DeadlineAfter: now.Add(time.Hour),
		MinJobs: 3, WaitedSince: now.Add(-30 * time.Minute), MaxJobs: 100, MaxBytes: 1 << 20,
		LeaseUntil: now.Add(25 * time.Hour), Margin: 10 * time.Minute, Owner: "r1", LeaseFor: time.Minute, Now: now}
}

// testProviderGroups: which jobs a group takes (class, deadline, bounds,
// max_wait), the intent before the provider id, leases and fencing
// between routers, each line written back once with its spend, and the
// group's end.
func testProviderGroups(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	now := T0
	lowJob := func(deadline time.Time) *jobstore.Job {
		p := job("pg", now)
		p.Priority, p.Deadline = llm.Low, deadline
		return insert(t, s, p)
	}
	a, b := lowJob(time.Time{}), lowJob(now.Add(10*time.Hour))
	lowJob(now.Add(30 * time.Minute)) // too near its deadline to route
	insert(t, s, job("pg", now))      // normal: not routed

	// Two eligible jobs, three wanted, none waited long enough: no group.
	res, err := s.CreateGroup(ctx, groupParams("pg", now))
	require.NoError(t, err)
	require.Nil(t, res.Group)
	// Once one has waited max_wait, a group of two.
	later := now.Add(31 * time.Minute)
	p := groupParams("pg", later)
	p.ID = "grp_1"
	res, err = s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.NotNil(t, res.Group)
	g := res.Group
	require.Equal(t, jobstore.GroupPending, g.State)
	require.Equal(t, 2, g.Jobs)
	require.Equal(t, now.Add(10*time.Hour-10*time.Minute), g.PullBackAt)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, []int64{a.ID, b.ID}, []int64{res.Jobs[0].ID, res.Jobs[1].ID})
	for _, j := range res.Jobs {
		require.Equal(t, jobstore.StateRunning, j.State)
		require.Equal(t, "group:grp_1", j.Lease.Owner)
	}
	got, err := s.Get(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, now.Add(10*time.Hour-5*time.Minute), got.Lease.ExpiresAt, "a member's lease ends at its deadline less half the margin")
	// Taken jobs are not taken again, by a group or a claim.
	res2, err := s.CreateGroup(ctx, groupParams("pg", later))
	require.NoError(t, err)
	require.Nil(t, res2.Group)
	// The synchronous worker of a routed class claims only the jobs too
	// near their deadline to route (ClaimParams.DeadlineBy).
	low := llm.Low
	claimed, err := s.Claim(ctx, jobstore.ClaimParams{Upstream: "pg", Priority: &low, Limit: 10, Owner: "w", LeaseFor: time.Minute,
		DeadlineBy: now.Add(2 * time.Hour), Now: now})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, now.Add(30*time.Minute), claimed[0].Deadline)
	members, err := s.GroupMembers(ctx, "grp_1")
	require.NoError(t, err)
	require.Len(t, members, 2)

	// The intent, then the provider id; fenced by the token.
	_, err = s.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: "grp_1", Token: 1, SubmitStarted: true, Now: later})
	require.NoError(t, err)
	g, err = s.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: "grp_1", Token: 1, State: jobstore.GroupSubmitted, ProviderID: "msgbatch_1", Now: later})
	require.NoError(t, err)
	require.Equal(t, "msgbatch_1", g.ProviderID)
	require.Equal(t, later, g.SubmitStartedAt)
	require.Equal(t, later, g.SubmittedAt)
	_, err = s.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: "grp_1", Token: 7, State: jobstore.GroupCanceling, Now: later})
	require.ErrorIs(t, err, jobstore.ErrLeaseLost)
	_, err = s.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: "nope", Token: 1, Now: later})
	require.ErrorIs(t, err, jobstore.ErrNotFound)

	// Leases: the holder renews, another router waits for the lease to
	// end, then takes it with a new token.
	lp := jobstore.LeaseGroupsParams{Upstream: "pg", Owner: "r1", LeaseFor: time.Minute, Now: later}
	gs, err := s.LeaseGroups(ctx, lp)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, int64(1), gs[0].Lease.Token)
	lp.Owner = "r2"
	gs, err = s.LeaseGroups(ctx, lp)
	require.NoError(t, err)
	require.Empty(t, gs)
	lp.Now = later.Add(2 * time.Minute)
	gs, err = s.LeaseGroups(ctx, lp)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	require.Equal(t, int64(2), gs[0].Lease.Token)
	require.Equal(t, "msgbatch_1", gs[0].ProviderID)

	// The old holder can write nothing.
	spend := &jobstore.SpendEntry{Client: "c1", Upstream: "pg", Model: "m", Day: later, Nanos: 500, Requests: 1}
	line := jobstore.GroupLine{JobID: a.ID, Complete: &jobstore.Result{Status: 200, Body: []byte(`{"ok":1}`),
		Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}}, Spend: spend}
	_, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: "grp_1", Token: 1, Lines: []jobstore.GroupLine{line}, Now: later})
	require.ErrorIs(t, err, jobstore.ErrLeaseLost)
	// The new one writes a line once: twice is a no-op, spend included.
	for range 2 {
		fr, err := s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: "grp_1", Token: 2, Lines: []jobstore.GroupLine{line}, Now: later})
		require.NoError(t, err)
		require.False(t, fr.Ended)
	}
	got, err = s.Get(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateSucceeded, got.State)
	require.Equal(t, 1, got.Attempts)
	require.JSONEq(t, `{"ok":1}`, string(got.Result.Body))
	require.Equal(t, int64(4), got.Result.Usage.OutputTokens)

	// A job canceled while in the group: its line's spend is still added
	// (the provider billed it), its state stays canceled.
	_, err = s.Cancel(ctx, jobstore.CancelParams{ID: b.ID, Now: later})
	require.NoError(t, err)
	fr, err := s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: "grp_1", Token: 2, Now: later,
		Lines: []jobstore.GroupLine{{JobID: b.ID, Complete: &jobstore.Result{Status: 200}, Spend: spend}}})
	require.NoError(t, err)
	require.True(t, fr.Ended)
	require.Empty(t, fr.Finished[jobstore.StateSucceeded])
	got, err = s.Get(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateCanceled, got.State)
	rows, err := s.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, int64(1000), rows[0].Nanos)
	require.Equal(t, int64(2), rows[0].Requests)
	// An ended group is leased by nobody.
	gs, err = s.LeaseGroups(ctx, jobstore.LeaseGroupsParams{Upstream: "pg", Owner: "r2", LeaseFor: time.Minute, Now: later.Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, gs)

	// Release and dead lines.
	c, d := lowJob(time.Time{}), lowJob(time.Time{})
	lowJob(time.Time{})
	p = groupParams("pg", later)
	p.ID, p.MaxJobs = "grp_2", 2 // a full group is made at once
	res, err = s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.Equal(t, 2, res.Group.Jobs)
	fr, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: "grp_2", Token: 1, Now: later, Lines: []jobstore.GroupLine{
		{JobID: c.ID, Release: true},
		{JobID: d.ID, Dead: &jobstore.AttemptError{Status: 400, Kind: "client_error", Message: "bad"}, DeadResult: &jobstore.Result{Status: 400, Body: []byte(`{}`)}},
	}})
	require.NoError(t, err)
	require.True(t, fr.Ended)
	require.Equal(t, []int64{c.ID}, fr.Finished[jobstore.StateQueued])
	require.Equal(t, []int64{d.ID}, fr.Finished[jobstore.StateDead])
	got, err = s.Get(ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State)
	require.Equal(t, 0, got.Attempts)
	got, err = s.Get(ctx, d.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateDead, got.State)
	require.Len(t, got.Errors, 1)
	require.Equal(t, 400, got.Result.Status)
	// A job that is in no group of this id is refused.
	_, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: "grp_2", Token: 1, Now: later,
		Lines: []jobstore.GroupLine{{JobID: a.ID, Release: true}}})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	// Bytes bound a group (the first job always fits).
	p = groupParams("pg", later)
	p.MaxBytes = 1
	res, err = s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.Equal(t, 1, res.Group.Jobs)
	_, err = s.CreateGroup(ctx, jobstore.CreateGroupParams{Upstream: "pg"})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}

// testProviderGroupsLineBytes: with LineBytes, a group's bytes are its
// jobs' bodies and what each one's line adds, to the byte.
func testProviderGroupsLineBytes(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var body int64
	for range 5 {
		p := job("pl", T0)
		p.Priority = llm.Low
		body = int64(len(p.Body))
		insert(t, s, p)
	}
	wrapper := func(id int64) int64 { return 20 + id%2 }
	jobs := func(maxBytes int64) int {
		t.Helper()
		p := groupParams("pl", T0)
		p.MinJobs, p.WaitedSince, p.MaxBytes, p.LineBytes = 1, T0, maxBytes, wrapper
		res, err := s.CreateGroup(ctx, p)
		require.NoError(t, err)
		require.NotNil(t, res.Group)
		var size int64
		for _, j := range res.Jobs {
			size += body + wrapper(j.ID)
		}
		require.LessOrEqual(t, size, maxBytes)
		// Give the jobs back for the next try.
		lines := make([]jobstore.GroupLine, len(res.Jobs))
		for i, j := range res.Jobs {
			lines[i] = jobstore.GroupLine{JobID: j.ID, Release: true}
		}
		_, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: res.Group.ID, Token: res.Group.Lease.Token, Lines: lines, Now: T0})
		require.NoError(t, err)
		return len(res.Jobs)
	}
	page, err := s.List(ctx, jobstore.ListParams{Upstream: "pl"})
	require.NoError(t, err)
	var three int64
	for _, j := range page.Jobs[:3] { // the first three in claim order
		three += body + wrapper(j.ID)
	}
	require.Equal(t, 3, jobs(three), "exactly three lines' worth")
	require.Equal(t, 2, jobs(three-1), "one byte short of the third")
}

// testProviderGroupsConcurrent: routers forming groups at once never put
// a job in two groups.
func testProviderGroupsConcurrent(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	for range 60 {
		p := job("pc", T0)
		p.Priority = llm.Low
		insert(t, s, p)
	}
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p := groupParams("pc", T0)
				p.MinJobs, p.MaxJobs, p.Owner = 1, 7, fmt.Sprintf("r%d", r)
				res, err := s.CreateGroup(ctx, p)
				if !assertNoErr(t, err) || res.Group == nil {
					return
				}
				mu.Lock()
				for _, j := range res.Jobs {
					if g, dup := seen[j.ID]; dup {
						t.Errorf("job %d in groups %s and %s", j.ID, g, res.Group.ID)
					}
					seen[j.ID] = res.Group.ID
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 60)
}

func assertNoErr(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// testProviderGroupsPath: a group asked for one path (an OpenAI batch
// carries one endpoint) takes only the jobs sent to it; without a path
// it takes any.
func testProviderGroupsPath(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	add := func(path string) *jobstore.Job {
		p := job("pp", T0)
		p.Priority, p.Path = llm.Low, path
		return insert(t, s, p)
	}
	chat, emb, chat2 := add("/v1/chat/completions"), add("/v1/embeddings"), add("/v1/chat/completions")
	ids := func(res jobstore.CreateGroupResult) []int64 {
		var out []int64
		for _, j := range res.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	p := groupParams("pp", T0)
	p.MinJobs, p.Path = 1, "/v1/embeddings"
	res, err := s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []int64{emb.ID}, ids(res))
	p.Path = "/v1/responses"
	res, err = s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.Nil(t, res.Group, "no job is sent to that path")
	p.Path = ""
	res, err = s.CreateGroup(ctx, p)
	require.NoError(t, err)
	require.Equal(t, []int64{chat.ID, chat2.ID}, ids(res))
}

// testProviderGroupsFail: a line written back as a failure fails its job
// as Store.Fail does: a retry burns an attempt and requeues it at its
// time (or kills it on its last attempt), a reschedule requeues it
// without one, its error in the history, a terminal failure kills it;
// the group ends with them.
func testProviderGroupsFail(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	now := T0
	var jobs []*jobstore.Job
	for i := range 4 {
		p := job("pgf", now)
		p.Priority = llm.Low
		if i == 3 {
			p.MaxAttempts = 1 // its retry is its last attempt
		}
		jobs = append(jobs, insert(t, s, p))
	}
	res, err := s.CreateGroup(ctx, groupParams("pgf", now))
	require.NoError(t, err)
	require.NotNil(t, res.Group)
	require.Equal(t, 4, res.Group.Jobs)
	later := now.Add(time.Hour)
	retryAt := later.Add(10 * time.Second)
	e := jobstore.AttemptError{Status: 500, Kind: "transient", Message: "the provider's Batch API answered 500"}
	held := jobstore.AttemptError{Status: 429, Kind: "budget", Message: "client c1: day budget exhausted"}
	lines := []jobstore.GroupLine{
		{JobID: jobs[0].ID, Fail: &jobstore.FailParams{Kind: jobstore.FailRetry, Error: e, RetryAt: retryAt}},
		{JobID: jobs[1].ID, Fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: held, RetryAt: retryAt}},
		{JobID: jobs[2].ID, Fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e}},
		{JobID: jobs[3].ID, Fail: &jobstore.FailParams{Kind: jobstore.FailRetry, Error: e, RetryAt: retryAt}},
	}
	fr, err := s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: res.Group.ID, Token: res.Group.Lease.Token, Lines: lines, Now: later})
	require.NoError(t, err)
	require.True(t, fr.Ended)
	require.ElementsMatch(t, []int64{jobs[0].ID, jobs[1].ID}, fr.Finished[jobstore.StateQueued])
	require.ElementsMatch(t, []int64{jobs[2].ID, jobs[3].ID}, fr.Finished[jobstore.StateDead])
	for i, want := range []struct {
		state    jobstore.State
		attempts int
		avail    time.Time
	}{{jobstore.StateQueued, 1, retryAt}, {jobstore.StateQueued, 0, retryAt}, {jobstore.StateDead, 1, time.Time{}}, {jobstore.StateDead, 1, time.Time{}}} {
		got, err := s.Get(ctx, jobs[i].ID)
		require.NoError(t, err)
		require.Equal(t, want.state, got.State, "job %d", i)
		require.Equal(t, want.attempts, got.Attempts, "job %d", i)
		if !want.avail.IsZero() {
			require.Equal(t, want.avail, got.AvailableAt, "job %d", i)
		}
		require.Len(t, got.Errors, 1, "job %d: the line's error in its history", i)
	}
	got, err := s.Get(ctx, jobs[1].ID)
	require.NoError(t, err)
	require.Equal(t, "budget", got.Errors[0].Kind)
	// Written once: a second write-back of the same lines changes nothing.
	fr, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: res.Group.ID, Token: res.Group.Lease.Token, Lines: lines, Now: later})
	require.NoError(t, err)
	require.Empty(t, fr.Written)
	got, err = s.Get(ctx, jobs[0].ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts)
	// A failure line must be alone.
	_, err = s.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: res.Group.ID, Token: res.Group.Lease.Token, Now: later,
		Lines: []jobstore.GroupLine{{JobID: jobs[0].ID, Release: true, Fail: &jobstore.FailParams{Kind: jobstore.FailRetry}}}})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}
