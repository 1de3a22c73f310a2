package mock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
)

// The official SDKs drive the mock's Batch APIs on a fake clock: they
// decode its batch objects, JSONL results and files with their own code.

func startBatchMock(t *testing.T, cfg Config) (*Server, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	return startMock(t, cfg), fc
}

var batchPrices = map[string]BatchPrice{"claude-sonnet-4-5": {Input: 3, Output: 15}, "gpt-4o-mini": {Input: 0.15, Output: 0.6}}

// wantCost is the batch cost of a line, computed here on its own: half
// the standard price, in nano-dollars rounded up.
func wantCost(in, out int64, p BatchPrice) int64 {
	return int64(math.Ceil(math.Round((float64(in)*p.Input+float64(out)*p.Output)*500*1e3) / 1e3))
}

func anthropicBatchParams(ids ...string) anthropic.MessageBatchNewParams {
	var p anthropic.MessageBatchNewParams
	for i, id := range ids {
		p.Requests = append(p.Requests, anthropic.MessageBatchNewParamsRequest{CustomID: id,
			Params: anthropic.MessageBatchNewParamsRequestParams{Model: "claude-sonnet-4-5", MaxTokens: 32,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("Question number %d", i)))}}})
	}
	return p
}

func TestSDKAnthropicBatchLifecycle(t *testing.T) {
	t.Parallel()
	s, fc := startBatchMock(t, Config{Limits: Limits{RPM: 1}, Batch: BatchConfig{Processing: 2 * time.Minute, ErrorRate: 0.25, Prices: batchPrices}})
	c := anthropicClient(s.URL())
	ids := []string{"a-0", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7"}
	b, err := c.Messages.Batches.New(t.Context(), anthropicBatchParams(ids...))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(b.ID, "msgbatch_01"), b.ID)
	require.Equal(t, anthropic.MessageBatchProcessingStatusInProgress, b.ProcessingStatus)
	require.Equal(t, int64(8), b.RequestCounts.Processing)
	require.Equal(t, t0.Add(24*time.Hour), b.ExpiresAt.UTC())
	require.Empty(t, b.ResultsURL)

	// Batch lines take nothing from the synchronous buckets (RPM 1).
	_, err = c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	require.NoError(t, err)

	fc.Advance(time.Minute)
	b, err = c.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
	require.NoError(t, err)
	require.Equal(t, anthropic.MessageBatchProcessingStatusInProgress, b.ProcessingStatus)
	require.Equal(t, int64(8), b.RequestCounts.Processing, "counts stay in processing until the batch ends")

	fc.Advance(time.Minute)
	b, err = c.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
	require.NoError(t, err)
	require.Equal(t, anthropic.MessageBatchProcessingStatusEnded, b.ProcessingStatus)
	require.Equal(t, int64(6), b.RequestCounts.Succeeded)
	require.Equal(t, int64(2), b.RequestCounts.Errored)
	require.Equal(t, s.URL()+"/v1/messages/batches/"+b.ID+"/results", b.ResultsURL)

	stream := c.Messages.Batches.ResultsStreaming(t.Context(), b.ID, anthropic.MessageBatchResultsParams{})
	var got []string
	var cost, in, out int64
	for stream.Next() {
		r := stream.Current()
		got = append(got, r.CustomID)
		switch r.Result.Type {
		case "succeeded":
			m := r.Result.Message
			require.Equal(t, "batch", string(m.Usage.ServiceTier))
			require.Positive(t, m.Usage.OutputTokens)
			in, out = in+m.Usage.InputTokens, out+m.Usage.OutputTokens
			cost += wantCost(m.Usage.InputTokens, m.Usage.OutputTokens, batchPrices["claude-sonnet-4-5"])
		case "errored":
			require.Equal(t, "api_error", string(r.Result.Error.Error.Type))
		default:
			t.Fatalf("result %s: type %s", r.CustomID, r.Result.Type)
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.ElementsMatch(t, ids, got, "every custom_id exactly once")
	require.NotEqual(t, ids, got, "results come in the order the lines finished")

	st := s.Stats().Keys["sk-ant-test"]
	require.Equal(t, int64(1), st.Admitted.Requests, "only the synchronous request was admitted")
	require.Equal(t, int64(1), st.Batch.Batches)
	require.Equal(t, map[string]int64{"succeeded": 6, "errored": 2}, st.Batch.Lines)
	require.Equal(t, in, st.Batch.InputTokens)
	require.Equal(t, out, st.Batch.OutputTokens)
	require.Equal(t, cost, st.Batch.CostNanos)
	require.Equal(t, cost, s.Stats().Overall.Batch.CostNanos)

	// Deleting the batch keeps what was billed.
	del, err := c.Messages.Batches.Delete(t.Context(), b.ID, anthropic.MessageBatchDeleteParams{})
	require.NoError(t, err)
	require.Equal(t, b.ID, del.ID)
	require.Equal(t, cost, s.Stats().Keys["sk-ant-test"].Batch.CostNanos)
	_, err = c.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
	requireStatus(t, err, http.StatusNotFound)
}

// requireStatus checks an SDK error's HTTP status.
func requireStatus(t *testing.T, err error, status int) {
	t.Helper()
	require.Error(t, err)
	var ae *anthropic.Error
	var oe *openai.Error
	switch {
	case errorsAs(err, &ae):
		require.Equal(t, status, ae.StatusCode, err.Error())
	case errorsAs(err, &oe):
		require.Equal(t, status, oe.StatusCode, err.Error())
	default:
		t.Fatalf("not an API error: %v", err)
	}
}

func TestAnthropicBatchCancelExpiryAndDelete(t *testing.T) {
	t.Parallel()
	s, fc := startBatchMock(t, Config{Batch: BatchConfig{Processing: 10 * time.Minute, CancelDelay: time.Minute, Window: 30 * time.Minute}})
	c := anthropicClient(s.URL())
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("req-%02d", i)
	}
	b, err := c.Messages.Batches.New(t.Context(), anthropicBatchParams(ids...))
	require.NoError(t, err)
	_, err = c.Messages.Batches.Delete(t.Context(), b.ID, anthropic.MessageBatchDeleteParams{})
	requireStatus(t, err, http.StatusBadRequest) // still in progress

	fc.Advance(5 * time.Minute)
	b, err = c.Messages.Batches.Cancel(t.Context(), b.ID, anthropic.MessageBatchCancelParams{})
	require.NoError(t, err)
	require.Equal(t, anthropic.MessageBatchProcessingStatusCanceling, b.ProcessingStatus)
	require.Equal(t, t0.Add(5*time.Minute), b.CancelInitiatedAt.UTC())
	fc.Advance(time.Minute)
	b, err = c.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
	require.NoError(t, err)
	require.Equal(t, anthropic.MessageBatchProcessingStatusEnded, b.ProcessingStatus)
	require.Equal(t, t0.Add(6*time.Minute), b.EndedAt.UTC())
	n := b.RequestCounts
	require.Equal(t, int64(20), n.Succeeded+n.Canceled)
	require.Positive(t, n.Succeeded)
	require.Positive(t, n.Canceled)
	_, err = c.Messages.Batches.Cancel(t.Context(), b.ID, anthropic.MessageBatchCancelParams{})
	requireStatus(t, err, http.StatusBadRequest) // ended

	st := s.Stats().Keys["sk-ant-test"].Batch
	require.Equal(t, n.Succeeded, st.Lines["succeeded"])
	require.Equal(t, n.Canceled, st.Lines["canceled"])
	require.Zero(t, st.UnpricedLines-n.Succeeded, "no prices configured: every billed line is unpriced")

	// Expiry: a batch slower than its window ends at the window with its
	// unfinished lines expired.
	s2, fc2 := startBatchMock(t, Config{Batch: BatchConfig{Processing: 10 * time.Minute, Window: 4 * time.Minute}})
	c2 := anthropicClient(s2.URL())
	b, err = c2.Messages.Batches.New(t.Context(), anthropicBatchParams(ids...))
	require.NoError(t, err)
	fc2.Advance(4 * time.Minute)
	b, err = c2.Messages.Batches.Get(t.Context(), b.ID, anthropic.MessageBatchGetParams{})
	require.NoError(t, err)
	require.Equal(t, anthropic.MessageBatchProcessingStatusEnded, b.ProcessingStatus)
	require.Equal(t, int64(20), b.RequestCounts.Succeeded+b.RequestCounts.Expired)
	require.Positive(t, b.RequestCounts.Expired)
	stream := c2.Messages.Batches.ResultsStreaming(t.Context(), b.ID, anthropic.MessageBatchResultsParams{})
	expired := 0
	for stream.Next() {
		if stream.Current().Result.Type == "expired" {
			expired++
		}
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, int(b.RequestCounts.Expired), expired)
}

func TestAnthropicBatchListPaging(t *testing.T) {
	t.Parallel()
	s, fc := startBatchMock(t, Config{})
	c := anthropicClient(s.URL())
	var made []string
	for i := range 5 {
		b, err := c.Messages.Batches.New(t.Context(), anthropicBatchParams(fmt.Sprintf("x%d", i)))
		require.NoError(t, err)
		made = append(made, b.ID)
		fc.Advance(time.Second)
	}
	slices.Reverse(made) // newest first
	page, err := c.Messages.Batches.List(t.Context(), anthropic.MessageBatchListParams{Limit: anthropic.Int(2)})
	require.NoError(t, err)
	require.True(t, page.HasMore)
	require.Equal(t, made[:2], []string{page.Data[0].ID, page.Data[1].ID})
	var all []string
	iter := c.Messages.Batches.ListAutoPaging(t.Context(), anthropic.MessageBatchListParams{Limit: anthropic.Int(2)})
	for iter.Next() {
		all = append(all, iter.Current().ID)
	}
	require.NoError(t, iter.Err())
	require.Equal(t, made, all)
	page, err = c.Messages.Batches.List(t.Context(), anthropic.MessageBatchListParams{BeforeID: anthropic.String(made[3]), Limit: anthropic.Int(2)})
	require.NoError(t, err)
	require.Equal(t, made[1:3], []string{page.Data[0].ID, page.Data[1].ID})
	require.True(t, page.HasMore)
	// Another key sees none of them.
	other := anthropicClientKey(s.URL(), "sk-ant-other")
	page, err = other.Messages.Batches.List(t.Context(), anthropic.MessageBatchListParams{})
	require.NoError(t, err)
	require.Empty(t, page.Data)
	_, err = other.Messages.Batches.Get(t.Context(), made[0], anthropic.MessageBatchGetParams{})
	requireStatus(t, err, http.StatusNotFound)
}

func TestAnthropicBatchQueueLimit(t *testing.T) {
	t.Parallel()
	s, fc := startBatchMock(t, Config{Batch: BatchConfig{Processing: time.Minute, QueueRequests: 5}})
	first := call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, batchBody(4))
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	w := call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, batchBody(2))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Contains(t, w.Body.String(), `"type":"rate_limit_error"`)
	require.Contains(t, w.Body.String(), "limit of 5 batch requests in the processing queue")
	ra := w.Header().Get("Retry-After")
	require.NotEmpty(t, ra)
	var secs int
	_, err := fmt.Sscan(ra, &secs)
	require.NoError(t, err)
	require.LessOrEqual(t, secs, 60)
	// Another key has its own queue.
	require.Equal(t, http.StatusOK, call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k2"}, batchBody(5)).Code)
	// More than the whole queue never fits: no retry-after.
	w = call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, batchBody(6))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Empty(t, w.Header().Get("Retry-After"))
	fc.Advance(time.Duration(secs) * time.Second)
	require.Equal(t, http.StatusOK, call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, batchBody(2)).Code)
}

func batchBody(n int) string {
	var reqs []string
	for i := range n {
		reqs = append(reqs, fmt.Sprintf(`{"custom_id":"r%d","params":%s}`, i, anthropicBody))
	}
	return `{"requests":[` + strings.Join(reqs, ",") + `]}`
}

func TestAnthropicBatchCreateErrors(t *testing.T) {
	t.Parallel()
	s, fc := newMock(t, Config{Batch: BatchConfig{MaxRequests: 3, MaxBytes: 4096}})
	cases := []struct {
		name, body string
		status     int
		want       string
	}{
		{"not json", `{`, 400, "invalid request body"},
		{"no requests", `{}`, 400, "requests: Field required"},
		{"empty", `{"requests":[]}`, 400, "at least 1 item"},
		{"too many", batchBody(4), 400, "at most 3 items"},
		{"too large", `{"requests":[{"custom_id":"a","params":{"x":"` + strings.Repeat("a", 5000) + `"}}]}`, 413, "request_too_large"},
		{"no custom_id", `{"requests":[{"params":{}}]}`, 400, "requests.0.custom_id: Field required"},
		{"bad custom_id", `{"requests":[{"custom_id":"a b","params":{}}]}`, 400, "String should match pattern"},
		{"duplicate", `{"requests":[{"custom_id":"a","params":{}},{"custom_id":"a","params":{}}]}`, 400, "requests.1.custom_id: Duplicate"},
		{"no params", `{"requests":[{"custom_id":"a"}]}`, 400, "requests.0.params"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, tc.body)
			require.Equal(t, tc.status, w.Code, w.Body.String())
			require.Contains(t, w.Body.String(), `"type":"error"`)
			require.Contains(t, w.Body.String(), tc.want)
		})
	}
	// Invalid params are validated asynchronously: an errored result.
	w := call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"},
		`{"requests":[{"custom_id":"bad","params":{"model":"claude-sonnet-4-5","messages":[]}}]}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var b struct{ ID string }
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &b))
	fc.Advance(BatchProcessingDefault)
	w = call(s, http.MethodGet, messageBatchesPath+"/"+b.ID+"/results", map[string]string{"x-api-key": "k"}, "")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), `{"custom_id":"bad","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error"`)
	require.Contains(t, w.Body.String(), "max_tokens: Field required")
}

func anthropicClientKey(url, key string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
}

func openAIClientKey(url, key string) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(url+"/v1"), ooption.WithAPIKey(key), ooption.WithMaxRetries(0))
}

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }

func openAIBatchFile(endpoint string, n int) string {
	var b strings.Builder
	for i := range n {
		body := openAIBody
		switch endpoint {
		case "/v1/embeddings":
			body = fmt.Sprintf(`{"model":"text-embedding-3-small","input":"text %d"}`, i)
		case "/v1/responses":
			body = fmt.Sprintf(`{"model":"gpt-4o-mini","input":"question %d","max_output_tokens":32}`, i)
		}
		fmt.Fprintf(&b, `{"custom_id":"c-%d","method":"POST","url":%q,"body":%s}`+"\n", i, endpoint, body)
	}
	return b.String()
}

func uploadBatchFile(t *testing.T, c openai.Client, content string) string {
	t.Helper()
	f, err := c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(content), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	require.Equal(t, "batch", string(f.Purpose))
	require.Equal(t, int64(len(content)), f.Bytes)
	return f.ID
}

func fileContent(t *testing.T, c openai.Client, id string) []byte {
	t.Helper()
	resp, err := c.Files.Content(t.Context(), id)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func TestSDKOpenAIBatchLifecycle(t *testing.T) {
	t.Parallel()
	for _, endpoint := range openAIBatchEndpoints {
		t.Run(strings.TrimPrefix(endpoint, "/v1/"), func(t *testing.T) {
			t.Parallel()
			s, fc := startBatchMock(t, Config{Limits: Limits{RPM: 1}, Batch: BatchConfig{Processing: 2 * time.Minute,
				Validation: 10 * time.Second, Finalizing: 20 * time.Second, ErrorRate: 0.1, Prices: batchPrices}})
			c := openAIClient(s.URL())
			fileID := uploadBatchFile(t, c, openAIBatchFile(endpoint, 10))
			b, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpoint(endpoint),
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			require.NoError(t, err)
			require.Equal(t, openai.BatchStatusValidating, b.Status)
			require.Zero(t, b.RequestCounts.Total, "the file is not read while validating")
			require.True(t, strings.HasPrefix(b.ID, "batch_"))
			fc.Advance(10 * time.Second)
			b, err = c.Batches.Get(t.Context(), b.ID)
			require.NoError(t, err)
			require.Equal(t, openai.BatchStatusInProgress, b.Status)
			require.Equal(t, int64(10), b.RequestCounts.Total)
			fc.Advance(2 * time.Minute)
			b, err = c.Batches.Get(t.Context(), b.ID)
			require.NoError(t, err)
			require.Equal(t, openai.BatchStatusFinalizing, b.Status)
			require.Empty(t, b.OutputFileID)
			fc.Advance(20 * time.Second)
			b, err = c.Batches.Get(t.Context(), b.ID)
			require.NoError(t, err)
			require.Equal(t, openai.BatchStatusCompleted, b.Status)
			require.Equal(t, int64(9), b.RequestCounts.Completed)
			require.Equal(t, int64(1), b.RequestCounts.Failed)
			require.NotEmpty(t, b.OutputFileID)
			require.NotEmpty(t, b.ErrorFileID)

			var got []string
			var cost, in int64
			for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
				for line := range bytes.Lines(fileContent(t, c, id)) {
					var l struct {
						ID       string `json:"id"`
						CustomID string `json:"custom_id"`
						Response struct {
							StatusCode int `json:"status_code"`
							Body       struct {
								Usage struct {
									PromptTokens     int64 `json:"prompt_tokens"`
									CompletionTokens int64 `json:"completion_tokens"`
									InputTokens      int64 `json:"input_tokens"`
									OutputTokens     int64 `json:"output_tokens"`
								} `json:"usage"`
							} `json:"body"`
						} `json:"response"`
					}
					require.NoError(t, json.Unmarshal(line, &l))
					require.True(t, strings.HasPrefix(l.ID, "batch_req_"))
					got = append(got, l.CustomID)
					if id == b.OutputFileID {
						require.Equal(t, 200, l.Response.StatusCode)
						u := l.Response.Body.Usage
						lin, lout := u.PromptTokens+u.InputTokens, u.CompletionTokens+u.OutputTokens
						in += lin
						cost += wantCost(lin, lout, batchPrices["gpt-4o-mini"])
					} else {
						require.Equal(t, 500, l.Response.StatusCode)
					}
				}
			}
			want := make([]string, 10)
			for i := range want {
				want[i] = fmt.Sprintf("c-%d", i)
			}
			require.ElementsMatch(t, want, got)
			st := s.Stats().Keys["sk-test"].Batch
			require.Equal(t, int64(9), st.Lines["succeeded"])
			require.Equal(t, in, st.InputTokens)
			require.Equal(t, b.Usage.InputTokens, st.InputTokens)
			require.Equal(t, b.Usage.OutputTokens, st.OutputTokens)
			if endpoint == "/v1/embeddings" {
				require.Equal(t, int64(9), st.UnpricedLines) // text-embedding-3-small has no price here
			} else {
				require.Equal(t, cost, st.CostNanos)
			}
			require.Zero(t, s.Stats().Keys["sk-test"].Admitted.Requests)
		})
	}
}

func TestOpenAIBatchFailsAndCancels(t *testing.T) {
	t.Parallel()
	s, fc := startBatchMock(t, Config{Batch: BatchConfig{Processing: 10 * time.Minute, CancelDelay: 30 * time.Second, EnqueuedTokens: 100}})
	c := openAIClient(s.URL())
	mixed := openAIBatchFile("/v1/chat/completions", 2) + `{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{}}` + "\n" + `{"custom_id":"c-0","method":"POST","url":"/v1/chat/completions","body":` + openAIBody + "}\n"
	b, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: uploadBatchFile(t, c, mixed),
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusFailed, b.Status)
	require.Len(t, b.Errors.Data, 2)
	require.Equal(t, "mismatched_endpoint", b.Errors.Data[0].Code)
	require.Equal(t, int64(3), b.Errors.Data[0].Line)
	require.Equal(t, "duplicate_custom_id", b.Errors.Data[1].Code)

	// The enqueued-token limit: 4 lines of 4 input tokens fit 100, the
	// next batch's do not while the first is unfinished.
	in := uploadBatchFile(t, c, openAIBatchFile("/v1/chat/completions", 20))
	ok, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: in, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusInProgress, ok.Status)
	over, err := c.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: in, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusFailed, over.Status)
	require.Equal(t, "token_limit_exceeded", over.Errors.Data[0].Code)
	require.Contains(t, over.Errors.Data[0].Message, "Enqueued token limit reached for gpt-4o-mini")

	fc.Advance(5 * time.Minute)
	ok, err = c.Batches.Cancel(t.Context(), ok.ID)
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusCancelling, ok.Status)
	fc.Advance(30 * time.Second)
	ok, err = c.Batches.Get(t.Context(), ok.ID)
	require.NoError(t, err)
	require.Equal(t, openai.BatchStatusCancelled, ok.Status)
	require.Equal(t, t0.Add(5*time.Minute+30*time.Second).Unix(), ok.CancelledAt)
	require.NotEmpty(t, ok.ErrorFileID)
	cancelled := bytes.Count(fileContent(t, c, ok.ErrorFileID), []byte(`"code":"batch_cancelled"`))
	require.Positive(t, cancelled)
	require.Equal(t, int64(20-cancelled), ok.RequestCounts.Completed)
	_, err = c.Batches.Cancel(t.Context(), ok.ID)
	requireStatus(t, err, http.StatusBadRequest)

	// Files: another key's is not found; delete removes it.
	other := openAIClientKey(s.URL(), "sk-other")
	_, err = other.Files.Get(t.Context(), in)
	requireStatus(t, err, http.StatusNotFound)
	_, err = c.Files.Delete(t.Context(), in)
	require.NoError(t, err)
	_, err = c.Files.Get(t.Context(), in)
	requireStatus(t, err, http.StatusNotFound)
	_, err = c.Batches.Get(t.Context(), "batch_nope")
	requireStatus(t, err, http.StatusNotFound)

	page, err := c.Batches.List(t.Context(), openai.BatchListParams{Limit: openai.Int(2)})
	require.NoError(t, err)
	require.Len(t, page.Data, 2)
	require.True(t, page.HasMore)
}

// TestOpenAIBatchFileTooLarge: an input file over the batch limit is
// refused at its upload as OpenAI refuses it.
func TestOpenAIBatchFileTooLarge(t *testing.T) {
	t.Parallel()
	s, _ := startBatchMock(t, Config{Batch: BatchConfig{MaxBytes: 10}})
	c := openAIClient(s.URL())
	_, err := c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader("0123456789"), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	require.NoError(t, err, "at the limit")
	_, err = c.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader("0123456789a"), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	var oe *openai.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusBadRequest, oe.StatusCode)
	require.JSONEq(t, `{"message":"File is too large.","type":"invalid_request_error","param":null,"code":null}`, oe.RawJSON())
}

func TestOpenAIBatchCreateErrors(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{})
	hdr := map[string]string{"Authorization": "Bearer k"}
	cases := []struct{ name, body, want string }{
		{"no file", `{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, "Missing required parameter: 'input_file_id'"},
		{"endpoint", `{"input_file_id":"file-x","endpoint":"/v1/completions","completion_window":"24h"}`, "Invalid value for 'endpoint'"},
		{"window", `{"input_file_id":"file-x","endpoint":"/v1/chat/completions","completion_window":"1h"}`, "completion_window"},
	}
	for _, tc := range cases {
		w := call(s, http.MethodPost, openAIBatchesPath, hdr, tc.body)
		require.Equal(t, http.StatusBadRequest, w.Code, tc.name)
		require.Contains(t, w.Body.String(), tc.want, tc.name)
		require.Contains(t, w.Body.String(), `"type":"invalid_request_error"`, tc.name)
	}
	w := call(s, http.MethodPost, openAIBatchesPath, hdr, `{"input_file_id":"file-x","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Contains(t, w.Body.String(), "No such File object: file-x")
	w = call(s, http.MethodPost, filesPath, hdr, "x")
	require.Equal(t, http.StatusBadRequest, w.Code)
}
