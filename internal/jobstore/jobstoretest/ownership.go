package jobstoretest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// testOwnership: idempotency keys are scoped per client (two clients may
// use the same key for different jobs, and each gets its own back), a
// batch keeps its client, Requeue with Client touches only that client's
// jobs, and List filters by client.
func testOwnership(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	a, b := job("u", T0), job("u", T0)
	a.Client, b.Client = "alice", "bob"
	a.IdempotencyKey, b.IdempotencyKey = "shared", "shared"
	b.Body = []byte(`{"model":"m","max_tokens":20}`)
	ja, jb := insert(t, s, a), insert(t, s, b)
	require.NotEqual(t, ja.ID, jb.ID, "the same key from two clients makes two jobs")
	require.Equal(t, "alice", ja.Client)

	again, err := s.Insert(ctx, b)
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, jb.ID, again.Job.ID)
	require.Equal(t, "bob", again.Job.Client)
	require.Equal(t, b.Body, again.Job.Body, "the existing job's body comes back, for the caller to compare")

	got, err := s.Get(ctx, ja.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", got.Client)
	require.Equal(t, "shared", got.IdempotencyKey)

	page, err := s.List(ctx, jobstore.ListParams{Client: "bob"})
	require.NoError(t, err)
	require.Equal(t, []int64{jb.ID}, ids(page.Jobs))

	// Requeue by client: kill both, requeue bob's only.
	for _, j := range claim(t, s, "u", 2, T0) {
		_, err := s.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: j.Lease.Token, Kind: jobstore.FailTerminal,
			Error: jobstore.AttemptError{Status: 400, Message: "bad"}, Now: T0})
		require.NoError(t, err)
	}
	n, err := s.Requeue(ctx, jobstore.RequeueParams{All: true, Client: "bob", Now: T0})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = s.Requeue(ctx, jobstore.RequeueParams{IDs: []int64{ja.ID}, Client: "bob", Now: T0})
	require.Equal(t, 0, n, "bob cannot requeue alice's job by id")
	require.Error(t, err)
	got, err = s.Get(ctx, ja.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateDead, got.State)

	bt, err := s.CreateBatch(ctx, jobstore.CreateBatchParams{Format: llm.Anthropic, Client: "alice",
		Jobs: []jobstore.InsertParams{withCustomID(a, "x")}, Now: T0})
	require.NoError(t, err)
	require.Equal(t, "alice", bt.Client)
	gb, err := s.GetBatch(ctx, bt.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", gb.Client)
}

func withCustomID(p jobstore.InsertParams, id string) jobstore.InsertParams {
	p.CustomID, p.IdempotencyKey = id, ""
	return p
}
