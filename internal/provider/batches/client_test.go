package batches

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// The client is tested against the mock provider through real HTTP, on
// the mock's fake clock: the mock shares no code with it, so what they
// agree on is the protocol.

var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

func startMock(t *testing.T, cfg mock.Config) (*mock.Server, *clock.Fake, string) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	s, err := mock.New(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, fc, hs.URL
}

func newClient(t *testing.T, p llm.Protocol, url, key string) *Client {
	t.Helper()
	c, err := New(Config{Protocol: p, BaseURL: url, APIKey: key})
	require.NoError(t, err)
	return c
}

func lines(p llm.Protocol, n int) []Line {
	out := make([]Line, n)
	for i := range out {
		body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"question %d"}]}`, i)
		if p == llm.OpenAI {
			body = fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"question %d"}]}`, i)
		}
		out[i] = Line{CustomID: fmt.Sprintf("job-%03d", i), Body: []byte(body)}
	}
	return out
}

var prices = map[string]mock.BatchPrice{"claude-sonnet-4-5": {Input: 3, Output: 15}, "gpt-4o-mini": {Input: 0.15, Output: 0.6}}

func TestClientRoundTrip(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			s, fc, url := startMock(t, mock.Config{Batch: mock.BatchConfig{Processing: 10 * time.Minute, ErrorRate: 0.1, Prices: prices}})
			c := newClient(t, p, url, "key-a")
			b, err := c.Create(t.Context(), CreateParams{Lines: lines(p, 30)})
			require.NoError(t, err)
			require.False(t, b.Ended)
			require.Equal(t, 30, b.Counts.Total)
			require.Equal(t, t0.Add(24*time.Hour), b.ExpiresAt)
			require.ErrorIs(t, c.Results(t.Context(), b, func(Result) error { return nil }), ErrNotFound)

			fc.Advance(10 * time.Minute)
			b, err = c.Get(t.Context(), b.ID)
			require.NoError(t, err)
			require.True(t, b.Ended, b.Status)
			require.Equal(t, Counts{Total: 30, Succeeded: 27, Errored: 3}, b.Counts)
			require.False(t, b.EndedAt.IsZero())

			seen := map[string]ResultType{}
			var in, out int64
			require.NoError(t, c.Results(t.Context(), b, func(r Result) error {
				_, dup := seen[r.CustomID]
				require.False(t, dup, r.CustomID)
				seen[r.CustomID] = r.Type
				switch r.Type {
				case Succeeded:
					require.True(t, r.HasUsage)
					require.Equal(t, http.StatusOK, r.Status)
					in, out = in+r.Usage.InputTokens, out+r.Usage.OutputTokens
					if p == llm.Anthropic {
						require.Equal(t, "batch", r.Usage.ServiceTier)
					}
				case Errored:
					require.True(t, r.Retryable(), "a server error may be retried")
					require.Equal(t, http.StatusInternalServerError, r.Status)
					require.NotEmpty(t, r.ErrorMessage)
				default:
					t.Fatalf("%s: %s", r.CustomID, r.Type)
				}
				return nil
			}))
			require.Len(t, seen, 30)
			billed := s.Stats().Keys["key-a"].Batch
			require.Equal(t, billed.InputTokens, in, "the usage read equals what the provider billed")
			require.Equal(t, billed.OutputTokens, out)
			require.Positive(t, billed.CostNanos)

			require.NoError(t, c.Delete(t.Context(), b))
			require.NoError(t, c.Delete(t.Context(), b), "cleaning up twice is fine")
			if p == llm.Anthropic {
				_, err = c.Get(t.Context(), b.ID)
				require.ErrorIs(t, err, ErrNotFound)
			} else {
				require.ErrorIs(t, c.Results(t.Context(), b, func(Result) error { return nil }), ErrNotFound, "the files are gone")
			}
		})
	}
}

func TestClientCancel(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			_, fc, url := startMock(t, mock.Config{Batch: mock.BatchConfig{Processing: 10 * time.Minute, CancelDelay: time.Minute}})
			c := newClient(t, p, url, "key-a")
			b, err := c.Create(t.Context(), CreateParams{Lines: lines(p, 20)})
			require.NoError(t, err)
			fc.Advance(4 * time.Minute)
			b, err = c.Cancel(t.Context(), b.ID)
			require.NoError(t, err)
			require.False(t, b.Ended)
			require.Equal(t, t0.Add(4*time.Minute), b.CancelAt)
			fc.Advance(time.Minute)
			b, err = c.Get(t.Context(), b.ID)
			require.NoError(t, err)
			require.True(t, b.Ended)
			types := map[ResultType]int{}
			require.NoError(t, c.Results(t.Context(), b, func(r Result) error {
				types[r.Type]++
				if r.Type == Canceled {
					require.True(t, r.Retryable())
					require.False(t, r.HasUsage)
				}
				return nil
			}))
			require.Equal(t, 20, types[Succeeded]+types[Canceled])
			require.Positive(t, types[Canceled])
			require.Positive(t, types[Succeeded])
			_, err = c.Cancel(t.Context(), b.ID)
			require.ErrorIs(t, err, ErrInvalid, "an ended batch cannot be cancelled")
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	s, _, url := startMock(t, mock.Config{Batch: mock.BatchConfig{QueueRequests: 10, EnqueuedTokens: 20}})
	anth := newClient(t, llm.Anthropic, url, "key-a")
	oai := newClient(t, llm.OpenAI, url, "key-a")
	ctx := t.Context()

	// Local checks: nothing is sent.
	for _, ls := range [][]Line{nil, {{CustomID: "", Body: []byte(`{}`)}}, {{CustomID: "a", Body: []byte(`{}`)}, {CustomID: "a", Body: []byte(`{}`)}},
		{{CustomID: "a", Body: []byte(`[1]`)}}, {{CustomID: "a", Body: []byte(`{"x":`)}}} {
		_, err := anth.Create(ctx, CreateParams{Lines: ls})
		require.ErrorIs(t, err, ErrInvalid)
	}
	_, err := oai.Create(ctx, CreateParams{Endpoint: "/v1/completions", Lines: lines(llm.OpenAI, 1)})
	require.ErrorIs(t, err, ErrInvalid)

	// The provider's own 400 (Anthropic's custom_id pattern).
	_, err = anth.Create(ctx, CreateParams{Lines: []Line{{CustomID: "a b", Body: lines(llm.Anthropic, 1)[0].Body}}})
	require.ErrorIs(t, err, ErrInvalid)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusBadRequest, e.Outcome.Status)
	require.Equal(t, "invalid_request_error", e.Outcome.ErrorType)

	// Anthropic's processing queue: a 429 with a retry hint.
	_, err = anth.Create(ctx, CreateParams{Lines: lines(llm.Anthropic, 8)})
	require.NoError(t, err)
	_, err = anth.Create(ctx, CreateParams{Lines: lines(llm.Anthropic, 8)})
	require.ErrorIs(t, err, ErrLimit)
	require.ErrorAs(t, err, &e)
	wait, ok := e.RetryAfter()
	require.True(t, ok)
	require.Positive(t, wait)

	// OpenAI's enqueued tokens: the batch is made and fails at once; its
	// input file is cleaned up by the caller with Delete.
	b, err := oai.Create(ctx, CreateParams{Lines: lines(llm.OpenAI, 5)})
	require.NoError(t, err)
	require.Nil(t, b.Err())
	b, err = oai.Create(ctx, CreateParams{Lines: lines(llm.OpenAI, 5)})
	require.ErrorIs(t, err, ErrLimit)
	require.NotNil(t, b)
	require.True(t, b.Ended)
	require.Equal(t, "token_limit_exceeded", b.Errors[0].Code)
	require.NoError(t, oai.Delete(ctx, b))

	// An OpenAI batch whose lines fail validation.
	bad := []Line{{CustomID: "x", Body: []byte(`{"model":"gpt-4o-mini","messages":[]}`)}}
	b, err = oai.Create(ctx, CreateParams{Lines: bad})
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, llm.OpenAIBatchFailed, b.Status)
	require.Equal(t, 1, *b.Errors[0].Line)

	_, err = anth.Get(ctx, "msgbatch_nope")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = oai.Get(ctx, "batch_nope")
	require.ErrorIs(t, err, ErrNotFound)

	require.NoError(t, s.RevokeKey("key-r", mock.KeyRevoked))
	_, err = newClient(t, llm.Anthropic, url, "key-r").Get(ctx, "msgbatch_x")
	require.ErrorIs(t, err, ErrRejected)

	// A provider that cannot be reached.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	_, err = newClient(t, llm.OpenAI, dead.URL, "k").Get(ctx, "batch_x")
	require.ErrorIs(t, err, ErrUnavailable)

	_, err = New(Config{Protocol: "gemini", BaseURL: "ftp://x"})
	require.ErrorContains(t, err, "protocol")
	require.ErrorContains(t, err, "base_url")
	require.True(t, errors.Is(fmt.Errorf("wrapped: %w", err), err))
}

func TestClientEndpoints(t *testing.T) {
	t.Parallel()
	_, fc, url := startMock(t, mock.Config{Batch: mock.BatchConfig{Processing: time.Minute}})
	c := newClient(t, llm.OpenAI, url, "key-a")
	for endpoint, body := range map[string]string{
		"/v1/embeddings": `{"model":"text-embedding-3-small","input":"hello world"}`,
		"/v1/responses":  `{"model":"gpt-4o-mini","input":"hello","max_output_tokens":16}`,
	} {
		b, err := c.Create(t.Context(), CreateParams{Endpoint: endpoint, Lines: []Line{{CustomID: "one", Body: []byte(body)}}})
		require.NoError(t, err, endpoint)
		fc.Advance(time.Minute)
		b, err = c.Get(t.Context(), b.ID)
		require.NoError(t, err)
		n := 0
		require.NoError(t, c.Results(t.Context(), b, func(r Result) error {
			n++
			require.Equal(t, Succeeded, r.Type, endpoint)
			require.True(t, r.HasUsage, endpoint)
			require.Positive(t, r.Usage.InputTokens, endpoint)
			return nil
		}))
		require.Equal(t, 1, n)
	}
}

// TestClientList pages a key's batches newest first, with an OpenAI
// batch's metadata, and sees no other key's.
func TestClientList(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			_, fc, url := startMock(t, mock.Config{})
			c := newClient(t, p, url, "key-a")
			var ids []string
			for i := range 5 {
				b, err := c.Create(t.Context(), CreateParams{Lines: lines(p, 2), Metadata: map[string]string{"n": fmt.Sprint(i)}})
				require.NoError(t, err)
				ids = append([]string{b.ID}, ids...) // newest first
				fc.Advance(time.Second)
			}
			_, err := newClient(t, p, url, "key-b").Create(t.Context(), CreateParams{Lines: lines(p, 1)})
			require.NoError(t, err)

			var got []string
			after := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 5)
				pg, err := c.List(t.Context(), ListParams{After: after, Limit: 2})
				require.NoError(t, err)
				for _, b := range pg.Batches {
					got = append(got, b.ID)
					if p == llm.OpenAI {
						require.Equal(t, fmt.Sprint(4-slices.Index(ids, b.ID)), b.Metadata["n"])
					}
				}
				if !pg.HasMore {
					break
				}
				after = pg.Batches[len(pg.Batches)-1].ID
			}
			require.Equal(t, ids, got)
			_, err = c.List(t.Context(), ListParams{Limit: 101})
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}
