package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"
)

// OpenAI's Batch and Files APIs on the gateway, spoken over HTTP as the
// official SDK speaks them (multipart upload, JSON bodies, the provider's
// JSONL output format), in front of the mock.

type openAIHTTP struct {
	t    *testing.T
	base string
	key  string
}

func (o openAIHTTP) do(method, path, contentType string, body io.Reader) (int, []byte) {
	o.t.Helper()
	req, err := http.NewRequestWithContext(o.t.Context(), method, o.base+path, body)
	require.NoError(o.t, err)
	req.Header.Set("Authorization", "Bearer "+o.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(o.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(o.t, err)
	return resp.StatusCode, b
}

func (o openAIHTTP) upload(name string, content []byte) (int, map[string]any) {
	o.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	require.NoError(o.t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", name)
	require.NoError(o.t, err)
	_, err = fw.Write(content)
	require.NoError(o.t, err)
	require.NoError(o.t, mw.Close())
	status, body := o.do(http.MethodPost, "/v1/files", mw.FormDataContentType(), &buf)
	var out map[string]any
	require.NoError(o.t, json.Unmarshal(body, &out), string(body))
	return status, out
}

func (o openAIHTTP) json(method, path string, in any) (int, map[string]any) {
	o.t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(o.t, err)
		body = bytes.NewReader(b)
	}
	status, raw := o.do(method, path, "application/json", body)
	var out map[string]any
	require.NoError(o.t, json.Unmarshal(raw, &out), string(raw))
	return status, out
}

func chatLines(n int, prefix string) []byte {
	var b strings.Builder
	for i := range n {
		id := fmt.Sprintf("%s-%02d", prefix, i)
		fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","max_completion_tokens":16,"messages":[{"role":"user","content":"cid %s; hi"}]}}`+"\n", id, id)
	}
	return []byte(b.String())
}

func TestProviderBatchesOpenAIHTTP(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	base := "http://" + f.gateway.Addr() + "/openai"
	alice, bob := openAIHTTP{t, base, "ck-alice"}, openAIHTTP{t, base, "ck-bob"}

	status, file := alice.upload("in.jsonl", chatLines(8, "oa"))
	require.Equal(t, http.StatusOK, status, file)
	require.Equal(t, "file", file["object"])
	require.Equal(t, "batch", file["purpose"])
	fileID := file["id"].(string)

	status, b := alice.json(http.MethodPost, "/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions",
		"completion_window": "24h", "metadata": map[string]string{"run": "1"}})
	require.Equal(t, http.StatusOK, status, b)
	require.Equal(t, "batch", b["object"])
	id := b["id"].(string)
	require.Equal(t, map[string]any{"run": "1"}, b["metadata"])
	require.Eventually(t, func() bool {
		_, b = alice.json(http.MethodGet, "/v1/batches/"+id, nil)
		return b["status"] == "completed"
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, map[string]any{"total": 8.0, "completed": 8.0, "failed": 0.0}, b["request_counts"])
	require.Nil(t, b["error_file_id"])

	status, content := alice.do(http.MethodGet, "/v1/files/"+b["output_file_id"].(string)+"/content", "", nil)
	require.Equal(t, http.StatusOK, status)
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(content)), "\n") {
		var r struct {
			ID       string `json:"id"`
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int `json:"status_code"`
				Body       struct {
					Object  string `json:"object"`
					Choices []struct {
						Message struct{ Content string }
					}
				} `json:"body"`
			} `json:"response"`
			Error any `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, http.StatusOK, r.Response.StatusCode)
		require.Equal(t, "chat.completion", r.Response.Body.Object)
		require.NotEmpty(t, r.Response.Body.Choices[0].Message.Content, "the mock's answer")
		require.Nil(t, r.Error)
		seen[r.CustomID]++
	}
	calls := f.counter.counts()
	for i := range 8 {
		cid := fmt.Sprintf("oa-%02d", i)
		require.Equal(t, 1, seen[cid], cid)
		require.Equal(t, 1, calls[cid], cid)
	}

	// Tenancy: bob sees neither the batch nor the files.
	status, _ = bob.json(http.MethodGet, "/v1/batches/"+id, nil)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = bob.json(http.MethodGet, "/v1/files/"+fileID, nil)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = bob.do(http.MethodGet, "/v1/files/"+b["output_file_id"].(string)+"/content", "", nil)
	require.Equal(t, http.StatusNotFound, status)
	_, list := bob.json(http.MethodGet, "/v1/batches", nil)
	require.Empty(t, list["data"])
	_, list = alice.json(http.MethodGet, "/v1/batches?limit=1", nil)
	require.Len(t, list["data"], 1)
	require.Equal(t, "list", list["object"])
	_, list = alice.json(http.MethodGet, "/v1/files?purpose=batch", nil)
	require.Len(t, list["data"], 1)

	status, del := alice.json(http.MethodDelete, "/v1/files/"+fileID, nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, del["deleted"])
}

func TestProviderBatchesOpenAIValidation(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice := openAIHTTP{t, "http://" + f.gateway.Addr() + "/openai", "ck-alice"}
	bad := append(chatLines(2, "v"), []byte(`{"custom_id":"v-00","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`+"\n"+
		`{"custom_id":"v-03","method":"POST","url":"/v1/embeddings","body":{"model":"m"}}`+"\nnot json\n")...)
	_, file := alice.upload("bad.jsonl", bad)
	status, b := alice.json(http.MethodPost, "/v1/batches", map[string]any{"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"})
	require.Equal(t, http.StatusOK, status, b)
	require.Equal(t, "validating", b["status"], "as OpenAI: the batch is made, then fails its validation")
	require.Nil(t, b["errors"])
	status, b = alice.json(http.MethodGet, "/v1/batches/"+b["id"].(string), nil)
	require.Equal(t, http.StatusOK, status, b)
	require.Equal(t, "failed", b["status"])
	require.Equal(t, b["created_at"], b["failed_at"])
	errs := b["errors"].(map[string]any)["data"].([]any)
	var lines []float64
	for _, e := range errs {
		lines = append(lines, e.(map[string]any)["line"].(float64))
	}
	require.Equal(t, []float64{3, 4, 5}, lines, "%v", errs)
	require.Empty(t, f.counter.counts(), "nothing was sent")

	for name, tc := range map[string]struct {
		body map[string]any
		want string
	}{
		"completions not scheduled": {map[string]any{"input_file_id": file["id"], "endpoint": "/v1/completions", "completion_window": "24h"}, "not scheduled"},
		"window":                    {map[string]any{"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "1h"}, "completion_window"},
		"no file":                   {map[string]any{"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"}, "no file"},
	} {
		status, body := alice.json(http.MethodPost, "/v1/batches", tc.body)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, status, name)
		e := body["error"].(map[string]any)
		require.Contains(t, e["message"], tc.want, name)
		require.NotEmpty(t, e["type"], name)
	}
}

func (f *batchFixture) openai(key string) *openai.Client {
	c := openai.NewClient(ooption.WithBaseURL("http://"+f.gateway.Addr()+"/openai/v1"),
		ooption.WithAPIKey(key), ooption.WithMaxRetries(0))
	return &c
}

func TestProviderBatchesOpenAISDK(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 240) // 4 calls a second: the second batch is canceled mid-way
	alice, bob := f.openai("ck-alice"), f.openai("ck-bob")
	ctx := t.Context()

	in, err := alice.Files.New(ctx, openai.FileNewParams{File: bytes.NewReader(chatLines(6, "sdk")), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	require.Equal(t, "batch", string(in.Purpose))
	b, err := alice.Batches.New(ctx, openai.BatchNewParams{InputFileID: in.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{"run": "sdk"}})
	require.NoError(t, err)
	require.Equal(t, "sdk", b.Metadata["run"])
	require.Equal(t, openai.BatchStatusValidating, b.Status, "the create answers validating")
	require.Zero(t, b.InProgressAt)
	// An SDK polling loop, as the OpenAI cookbook writes it: poll until
	// a terminal status, through OpenAI's life cycle.
	statuses := []openai.BatchStatus{b.Status}
	require.Eventually(t, func() bool {
		b, err = alice.Batches.Get(ctx, b.ID)
		require.NoError(t, err)
		if statuses[len(statuses)-1] != b.Status {
			statuses = append(statuses, b.Status)
		}
		return slices.Contains([]openai.BatchStatus{openai.BatchStatusCompleted, openai.BatchStatusFailed,
			openai.BatchStatusExpired, openai.BatchStatusCancelled}, b.Status)
	}, time.Minute, 20*time.Millisecond)
	order := []openai.BatchStatus{openai.BatchStatusValidating, openai.BatchStatusInProgress, openai.BatchStatusFinalizing, openai.BatchStatusCompleted}
	require.Subset(t, order, statuses)
	for i := 1; i < len(statuses); i++ {
		require.Less(t, slices.Index(order, statuses[i-1]), slices.Index(order, statuses[i]), "statuses in OpenAI's order: %v", statuses)
	}
	require.Equal(t, int64(6), b.RequestCounts.Completed)
	require.Equal(t, b.CreatedAt, b.InProgressAt, "validated in the create")
	require.GreaterOrEqual(t, b.FinalizingAt, b.InProgressAt)
	require.Equal(t, b.FinalizingAt+1, b.CompletedAt, "a second of finalizing")

	resp, err := alice.Files.Content(ctx, b.OutputFileID)
	require.NoError(t, err)
	content, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(content)), "\n") {
		var r struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int                   `json:"status_code"`
				Body       openai.ChatCompletion `json:"body"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, http.StatusOK, r.Response.StatusCode)
		require.Equal(t, r.Response.Body.Usage.CompletionTokens, int64(len(strings.Fields(r.Response.Body.Choices[0].Message.Content))), "the mock's answer")
		seen[r.CustomID]++
	}
	calls := f.counter.counts()
	for i := range 6 {
		cid := fmt.Sprintf("sdk-%02d", i)
		require.Equal(t, 1, seen[cid], cid)
		require.Equal(t, 1, calls[cid], cid)
	}

	page, err := alice.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	page, err = bob.Batches.List(ctx, openai.BatchListParams{})
	require.NoError(t, err)
	require.Empty(t, page.Data)
	_, err = bob.Batches.Get(ctx, b.ID)
	var oe *openai.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.StatusCode)
	other, err := bob.Files.Content(ctx, b.OutputFileID)
	if other != nil {
		require.NoError(t, other.Body.Close())
	}
	require.ErrorAs(t, err, &oe)
	require.Equal(t, http.StatusNotFound, oe.StatusCode)

	// Cancel a second batch mid-way: some canceled, none lost.
	in2, err := alice.Files.New(ctx, openai.FileNewParams{File: bytes.NewReader(chatLines(16, "sdc")), Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	b2, err := alice.Batches.New(ctx, openai.BatchNewParams{InputFileID: in2.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	c, err := alice.Batches.Cancel(ctx, b2.ID)
	require.NoError(t, err)
	require.NotZero(t, c.CancellingAt)
	require.Eventually(t, func() bool {
		b2, err = alice.Batches.Get(ctx, b2.ID)
		require.NoError(t, err)
		return b2.Status == openai.BatchStatusCancelled
	}, time.Minute, 20*time.Millisecond)
	require.Less(t, b2.RequestCounts.Completed, int64(16))
	lines := 0
	for _, id := range []string{b2.OutputFileID, b2.ErrorFileID} {
		if id == "" {
			continue
		}
		resp, err := alice.Files.Content(ctx, id)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		lines += strings.Count(string(body), "\n")
	}
	require.Equal(t, 16, lines, "every request once in the output or error file")
}

// TestProviderBatchesOpenAIEmbeddings: a batch on /v1/embeddings is
// scheduled like a chat batch, each line sent to its url, and its output
// file carries the provider's embedding lists.
func TestProviderBatchesOpenAIEmbeddings(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t, 60_000)
	alice := openAIHTTP{t, "http://" + f.gateway.Addr() + "/openai", "ck-alice"}
	var in strings.Builder
	for i := range 4 {
		fmt.Fprintf(&in, `{"custom_id":"e-%d","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":["cid e-%d","two"]}}`+"\n", i, i)
	}
	status, file := alice.upload("emb.jsonl", []byte(in.String()))
	require.Equal(t, http.StatusOK, status, file)
	status, b := alice.json(http.MethodPost, "/v1/batches", map[string]any{"input_file_id": file["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"})
	require.Equal(t, http.StatusOK, status, b)
	require.Equal(t, "/v1/embeddings", b["endpoint"])
	id := b["id"].(string)
	require.Eventually(t, func() bool {
		_, b = alice.json(http.MethodGet, "/v1/batches/"+id, nil)
		return b["status"] == "completed"
	}, time.Minute, 20*time.Millisecond)
	require.Equal(t, map[string]any{"total": 4.0, "completed": 4.0, "failed": 0.0}, b["request_counts"])
	status, content := alice.do(http.MethodGet, "/v1/files/"+b["output_file_id"].(string)+"/content", "", nil)
	require.Equal(t, http.StatusOK, status)
	lines := strings.Split(strings.TrimSpace(string(content)), "\n")
	require.Len(t, lines, 4)
	for _, line := range lines {
		var r struct {
			Response struct {
				StatusCode int `json:"status_code"`
				Body       struct {
					Object string `json:"object"`
					Data   []any  `json:"data"`
				} `json:"body"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Equal(t, http.StatusOK, r.Response.StatusCode)
		require.Equal(t, "list", r.Response.Body.Object)
		require.Len(t, r.Response.Body.Data, 2, "one embedding per input")
	}
}
