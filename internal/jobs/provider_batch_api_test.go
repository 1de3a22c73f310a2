package jobs

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

// The BatchAPI on the providers' Batch API client, against the mock over
// HTTP on its fake clock.

func mockBatchAPI(t *testing.T, p llm.Protocol, cfg mock.BatchConfig) (BatchAPI, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(batchT0)
	m, err := mock.New(mock.Config{Clock: fc, Batch: cfg})
	require.NoError(t, err)
	hs := httptest.NewServer(m.Handler())
	t.Cleanup(hs.Close)
	api, err := NewBatchAPI(BatchAPIConfig{Upstream: upstream.Config{Name: "up", Protocol: p, BaseURL: hs.URL, APIKey: "sk"}, Clock: fc})
	require.NoError(t, err)
	return api, fc
}

func mockLines(p llm.Protocol, from, n int) []BatchLine {
	out := make([]BatchLine, n)
	for i := range out {
		body, path := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"q %d"}]}`, from+i), "/v1/messages"
		if p == llm.OpenAI {
			body, path = fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"q %d"}]}`, from+i), "/v1/chat/completions"
		}
		out[i] = BatchLine{CustomID: lineID(int64(from + i)), Path: path, Body: []byte(body)}
	}
	return out
}

// TestProviderBatchAPIRoundTrip: create, poll, results with usage, each
// line once; a cancel after the end is no error; a batch the provider
// does not have is ErrBatchNotFound.
func TestProviderBatchAPIRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			api, fc := mockBatchAPI(t, p, mock.BatchConfig{Processing: time.Hour, ErrorRate: 0.25})
			pb, err := api.Create(t.Context(), "grp_a", mockLines(p, 1, 8))
			require.NoError(t, err)
			require.False(t, pb.Ended)
			fc.Advance(time.Hour)
			got, err := api.Get(t.Context(), pb.ID)
			require.NoError(t, err)
			require.True(t, got.Ended)
			res, err := api.Results(t.Context(), pb.ID)
			require.NoError(t, err)
			require.Len(t, res, 8)
			outcomes := map[BatchLineOutcome]int{}
			seen := map[string]bool{}
			for _, r := range res {
				require.False(t, seen[r.CustomID])
				seen[r.CustomID] = true
				outcomes[r.Outcome]++
				if r.Outcome == LineSucceeded {
					require.Positive(t, r.Usage.OutputTokens)
					require.Equal(t, 200, r.Status)
				} else {
					require.GreaterOrEqual(t, r.Status, 500, "the mock's failed lines are server errors")
					require.NotEmpty(t, r.Body)
				}
			}
			require.Equal(t, map[BatchLineOutcome]int{LineSucceeded: 6, LineErrored: 2}, outcomes)
			require.NoError(t, api.Cancel(t.Context(), pb.ID), "a cancel after the end changes nothing")
			_, err = api.Get(t.Context(), "batch_missing")
			require.ErrorIs(t, err, ErrBatchNotFound)
		})
	}
}

// TestProviderBatchAPIFind: a create whose answer was lost is found (OpenAI:
// by the tag in its metadata; Anthropic: by its lines, once it has ended,
// and undecided before), and a create that never reached the provider is
// not found, so it is sent again.
func TestProviderBatchAPIFind(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			api, fc := mockBatchAPI(t, p, mock.BatchConfig{Processing: time.Hour})
			since := fc.Now()
			lost := mockLines(p, 1, 3)
			pb, err := api.Create(t.Context(), "grp_lost", lost)
			require.NoError(t, err)
			// Another group's batch of as many lines, made later.
			_, err = api.Create(t.Context(), "grp_other", mockLines(p, 10, 3))
			require.NoError(t, err)
			never := mockLines(p, 20, 3)

			got, found, err := api.Find(t.Context(), BatchQuery{Tag: "grp_lost", Since: since, Lines: lost})
			if p == llm.Anthropic {
				require.ErrorIs(t, err, ErrBatchUndecided, "running batches show no lines")
				fc.Advance(time.Hour)
				got, found, err = api.Find(t.Context(), BatchQuery{Tag: "grp_lost", Since: since, Lines: lost})
			}
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, pb.ID, got.ID)

			fc.Advance(time.Hour)
			_, found, err = api.Find(t.Context(), BatchQuery{Tag: "grp_never", Since: since, Lines: never})
			require.NoError(t, err)
			require.False(t, found)
			// A batch made well before the create began is not it.
			_, found, err = api.Find(t.Context(), BatchQuery{Tag: "grp_lost", Since: since.Add(time.Hour), Lines: lost})
			require.NoError(t, err)
			require.False(t, found)
		})
	}
}

// TestProviderBatchAPIRefusals: the provider's queue limit is
// ErrBatchQueueFull; a batch refused for its content (here: more lines
// than it takes) is a *BatchRefusalError with the provider's answer.
func TestProviderBatchAPIRefusals(t *testing.T) {
	t.Parallel()
	api, _ := mockBatchAPI(t, llm.Anthropic, mock.BatchConfig{QueueRequests: 4, MaxRequests: 6})
	_, err := api.Create(t.Context(), "grp_big", mockLines(llm.Anthropic, 1, 5))
	require.ErrorIs(t, err, ErrBatchQueueFull)

	_, err = api.Create(t.Context(), "grp_bad", mockLines(llm.Anthropic, 1, 7))
	var refusal *BatchRefusalError
	require.ErrorAs(t, err, &refusal)
	require.ErrorIs(t, err, ErrBatchRefused)
	require.Equal(t, 400, refusal.Status)
	require.Contains(t, string(refusal.Body), "invalid_request_error")

	// OpenAI takes the batch, then fails it for its enqueued-token
	// limit: its results are that refusal.
	api, fc := mockBatchAPI(t, llm.OpenAI, mock.BatchConfig{EnqueuedTokens: 1, Validation: time.Minute})
	pb, err := api.Create(t.Context(), "grp_tokens", mockLines(llm.OpenAI, 1, 5))
	require.NoError(t, err)
	fc.Advance(time.Minute)
	got, err := api.Get(t.Context(), pb.ID)
	require.NoError(t, err)
	require.True(t, got.Ended)
	_, err = api.Results(t.Context(), pb.ID)
	require.ErrorIs(t, err, ErrBatchQueueFull)
}
