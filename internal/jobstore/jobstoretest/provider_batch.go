package jobstoretest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// providerBatch creates a batch of n jobs on upstream u for client at now.
func providerBatch(t *testing.T, s jobstore.Store, client, u string, n int, now time.Time, keep time.Time) *jobstore.Batch {
	t.Helper()
	var items []jobstore.InsertParams
	for i := range n {
		p := job(u, now)
		p.Client, p.CustomID = client, fmt.Sprintf("r%d", i)
		items = append(items, p)
	}
	b, err := s.CreateBatch(context.Background(), jobstore.CreateBatchParams{Format: llm.Anthropic, Client: client, Upstream: u,
		Attrs: []byte(`{"k":1}`), KeepUntil: keep, Jobs: items, Now: now})
	require.NoError(t, err)
	return b
}

// testProviderBatches: the fields a provider's batch view needs (upstream,
// attrs, cancel time, end time), listing by upstream with cursors both
// ways, and deleting an ended batch.
func testProviderBatches(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var made []*jobstore.Batch
	for i := range 5 {
		made = append(made, providerBatch(t, s, "pc", "pa", 1, T0.Add(time.Duration(i)*time.Second), time.Time{}))
	}
	providerBatch(t, s, "pc", "other", 1, T0, time.Time{})
	providerBatch(t, s, "someone", "pa", 1, T0, time.Time{})

	b, err := s.GetBatch(ctx, made[0].ID)
	require.NoError(t, err)
	require.Equal(t, "pa", b.Upstream)
	require.JSONEq(t, `{"k":1}`, string(b.Attrs))
	require.True(t, b.EndedAt.IsZero())
	require.True(t, b.CancelRequestedAt.IsZero())

	idsOf := func(bs []*jobstore.Batch) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}
	all, err := s.ListBatches(ctx, jobstore.ListBatchesParams{Client: "pc", Upstream: "pa"})
	require.NoError(t, err)
	require.Equal(t, []string{made[4].ID, made[3].ID, made[2].ID, made[1].ID, made[0].ID}, idsOf(all))
	page, err := s.ListBatches(ctx, jobstore.ListBatchesParams{Client: "pc", Upstream: "pa", After: made[3].ID, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{made[2].ID, made[1].ID}, idsOf(page))
	page, err = s.ListBatches(ctx, jobstore.ListBatchesParams{Client: "pc", Upstream: "pa", Before: made[1].ID, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{made[3].ID, made[2].ID}, idsOf(page))
	page, err = s.ListBatches(ctx, jobstore.ListBatchesParams{Client: "pc", Upstream: "pa", After: "batch_missing"})
	require.NoError(t, err)
	require.Empty(t, page)
	_, err = s.ListBatches(ctx, jobstore.ListBatchesParams{After: "x", Before: "y"})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	// A live batch cannot be deleted; once canceled (ended) it can.
	require.ErrorIs(t, s.DeleteBatch(ctx, made[0].ID), jobstore.ErrConflict)
	_, err = s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: made[0].ID, Now: T0.Add(time.Minute)})
	require.NoError(t, err)
	_, err = s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: made[0].ID, Now: T0.Add(2 * time.Minute)})
	require.NoError(t, err)
	b, err = s.GetBatch(ctx, made[0].ID)
	require.NoError(t, err)
	require.Equal(t, T0.Add(time.Minute), b.CancelRequestedAt, "the first cancel is kept")
	require.Equal(t, T0.Add(time.Minute), b.EndedAt)
	jobsOf, err := s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: made[0].ID})
	require.NoError(t, err)
	require.NoError(t, s.DeleteBatch(ctx, made[0].ID))
	_, err = s.GetBatch(ctx, made[0].ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	_, err = s.Get(ctx, jobsOf.Jobs[0].ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.ErrorIs(t, s.DeleteBatch(ctx, made[0].ID), jobstore.ErrNotFound)

	// A batch without jobs (refused at validation) is ended at once.
	empty, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.OpenAI, Client: "pc", Upstream: "pa", AllowEmpty: true, Now: T0})
	require.NoError(t, err)
	require.True(t, empty.Ended())
	got, err := s.GetBatch(ctx, empty.ID)
	require.NoError(t, err)
	require.Equal(t, T0, got.EndedAt)
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.OpenAI, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}

// testBatchDeadJobs: a batch's job inserted dead (a request refused
// before it could run) is dead from the start, with its error and kept
// answer, never claimed nor counted live; a batch of only such jobs has
// ended when made. Insert refuses a dead job, and a dead job refuses a
// webhook.
func testBatchDeadJobs(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	refused := jobstore.AttemptError{Status: 400, Kind: llm.ClientError.String(), Message: "max_tokens: must be at least 1"}
	answer := &jobstore.Result{Status: 400, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: must be at least 1"}}`)}
	var items []jobstore.InsertParams
	for i, dead := range []bool{false, true, false} {
		p := job("dj", T0)
		p.CustomID = fmt.Sprintf("r%d", i)
		if dead {
			p.Dead, p.DeadResult = &refused, answer
		}
		items = append(items, p)
	}
	b, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Client: "c1", Upstream: "dj", Jobs: items, Now: T0})
	require.NoError(t, err)
	require.Equal(t, jobstore.BatchCounts{Queued: 2, Dead: 1}, b.Counts)
	require.Equal(t, 3, b.Total)
	got, err := s.GetBatch(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.BatchCounts{Queued: 2, Dead: 1}, got.Counts)
	require.False(t, got.Ended())

	page, err := s.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: b.ID})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)
	dead := page.Jobs[1]
	require.Equal(t, "r1", dead.CustomID)
	require.Equal(t, jobstore.StateDead, dead.State)
	require.Zero(t, dead.Attempts, "never sent")
	require.Equal(t, T0, dead.FinishedAt)
	require.Len(t, dead.Errors, 1)
	require.Equal(t, refused.Message, dead.Errors[0].Message)
	require.Equal(t, 400, dead.Errors[0].Status)
	require.Equal(t, T0, dead.Errors[0].At)
	require.NotNil(t, dead.Result)
	require.Equal(t, 400, dead.Result.Status)
	require.JSONEq(t, string(answer.Body), string(dead.Result.Body))
	require.Equal(t, "application/json", dead.Result.Header.Get("Content-Type"))

	claimed := claim(t, s, "dj", 10, T0)
	require.ElementsMatch(t, []int64{page.Jobs[0].ID, page.Jobs[2].ID}, ids(claimed), "the dead job is never claimed")
	live, err := s.CountLive(ctx, T0)
	require.NoError(t, err)
	require.Equal(t, []jobstore.LiveCount{{Upstream: "dj", Running: 2}}, live)

	// Only dead jobs: ended when made, at its creation.
	only := job("dj", T0.Add(time.Minute))
	only.CustomID, only.Dead = "x", &refused
	b, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: []jobstore.InsertParams{only}, Now: T0.Add(time.Minute)})
	require.NoError(t, err)
	require.True(t, b.Ended())
	got, err = s.GetBatch(ctx, b.ID)
	require.NoError(t, err)
	require.True(t, got.Ended())
	require.Equal(t, T0.Add(time.Minute), got.EndedAt)
	require.Equal(t, 1, got.Counts.Dead)

	single := job("dj", T0)
	single.Dead = &refused
	_, err = s.Insert(ctx, single)
	require.ErrorIs(t, err, jobstore.ErrInvalid, "Insert queues: a dead job only comes in a batch")
	hooked := job("dj", T0)
	hooked.CustomID, hooked.Dead, hooked.WebhookURL = "h", &refused, "https://example.com/hook"
	_, err = s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Jobs: []jobstore.InsertParams{hooked}, Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
}

// testBatchKeep: a batch kept until a time keeps its finished jobs past
// their state's retention, and both go once that time has passed.
func testBatchKeep(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	kept := providerBatch(t, s, "kc", "ku", 2, T0, T0.Add(48*time.Hour))
	plain := providerBatch(t, s, "kc", "ku", 2, T0, time.Time{})
	for _, b := range []*jobstore.Batch{kept, plain} {
		_, err := s.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: b.ID, Now: T0})
		require.NoError(t, err)
	}
	clean := func(now time.Time) {
		_, err := s.DeleteFinished(ctx, jobstore.DeleteFinishedParams{State: jobstore.StateCanceled, Before: now.Add(-time.Hour), Now: now})
		require.NoError(t, err)
	}
	clean(T0.Add(24 * time.Hour))
	_, err := s.GetBatch(ctx, plain.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound, "an unkept batch goes with its jobs")
	b, err := s.GetBatch(ctx, kept.ID)
	require.NoError(t, err)
	require.Equal(t, 2, b.Counts.Canceled, "kept past the state's retention")
	clean(T0.Add(49 * time.Hour))
	_, err = s.GetBatch(ctx, kept.ID)
	require.ErrorIs(t, err, jobstore.ErrNotFound, "gone once its keep has passed")
}

// testFiles: files are stored, read with or without content, listed
// newest first per client, upstream and purpose, and deleted.
func testFiles(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	var made []*jobstore.File
	for i := range 3 {
		f, err := s.CreateFile(ctx, jobstore.CreateFileParams{Client: "fc", Upstream: "fu", Purpose: "batch", Filename: fmt.Sprintf("f%d.jsonl", i),
			Content: []byte(fmt.Sprintf("line %d\n", i)), Now: T0.Add(time.Duration(i) * time.Second)})
		require.NoError(t, err)
		require.NotEmpty(t, f.ID)
		require.EqualValues(t, 7, f.Bytes)
		made = append(made, f)
	}
	_, err := s.CreateFile(ctx, jobstore.CreateFileParams{Client: "other", Upstream: "fu", Purpose: "batch", Now: T0})
	require.NoError(t, err)
	_, err = s.CreateFile(ctx, jobstore.CreateFileParams{Client: "fc", Upstream: "fu", Now: T0})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	_, err = s.CreateFile(ctx, jobstore.CreateFileParams{ID: made[0].ID, Client: "fc", Purpose: "batch", Now: T0})
	require.ErrorIs(t, err, jobstore.ErrConflict)

	f, err := s.GetFile(ctx, jobstore.GetFileParams{ID: made[1].ID})
	require.NoError(t, err)
	require.Nil(t, f.Content)
	require.Equal(t, "f1.jsonl", f.Filename)
	require.Equal(t, T0.Add(time.Second), f.CreatedAt)
	f, err = s.GetFile(ctx, jobstore.GetFileParams{ID: made[1].ID, Content: true})
	require.NoError(t, err)
	require.Equal(t, "line 1\n", string(f.Content))

	list, err := s.ListFiles(ctx, jobstore.ListFilesParams{Client: "fc", Upstream: "fu", Purpose: "batch"})
	require.NoError(t, err)
	require.Len(t, list, 3)
	require.Equal(t, made[2].ID, list[0].ID)
	list, err = s.ListFiles(ctx, jobstore.ListFilesParams{Client: "fc", After: made[2].ID, Limit: 1})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, made[1].ID, list[0].ID)

	require.NoError(t, s.DeleteFile(ctx, made[1].ID))
	_, err = s.GetFile(ctx, jobstore.GetFileParams{ID: made[1].ID})
	require.ErrorIs(t, err, jobstore.ErrNotFound)
	require.ErrorIs(t, s.DeleteFile(ctx, made[1].ID), jobstore.ErrNotFound)
}
