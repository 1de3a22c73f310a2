package jobsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// OpenAI's Batch and Files APIs as the API answers them (helpers in
// provider_batch_test.go).

// uploadBatchFile uploads content as a batch input file on gpt.
func uploadBatchFile(t *testing.T, s *testService, content string) (int, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	require.NoError(t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", "in.jsonl")
	require.NoError(t, err)
	_, err = fw.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	return providerCall(t, s, "gpt", http.MethodPost, "/v1/files", buf.Bytes(), mw.FormDataContentType())
}

func openAILines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, openAIBody)
	}
	return b.String()
}

// createOpenAIBatch uploads content and creates a batch of it.
func createOpenAIBatch(t *testing.T, s *testService, content string) jobsapi.OpenAIBatch {
	t.Helper()
	code, body := uploadBatchFile(t, s, content)
	require.Equal(t, http.StatusOK, code, string(body))
	f := decode[jobsapi.OpenAIFile](t, body)
	code, body = providerCall(t, s, "gpt", http.MethodPost, "/v1/batches",
		fmt.Appendf(nil, `{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, f.ID), "application/json")
	require.Equal(t, http.StatusOK, code, string(body))
	return decode[jobsapi.OpenAIBatch](t, body)
}

func getOpenAIBatch(t *testing.T, s *testService, id string) jobsapi.OpenAIBatch {
	t.Helper()
	code, body := providerCall(t, s, "gpt", http.MethodGet, "/v1/batches/"+id, nil, "")
	require.Equal(t, http.StatusOK, code, string(body))
	return decode[jobsapi.OpenAIBatch](t, body)
}

// finishJobs claims up to n of upstream's queued jobs and completes them
// at the clock's time.
func finishJobs(t *testing.T, s *testService, clk *clock.Fake, upstream string, n int) {
	t.Helper()
	ctx := context.Background()
	jobs, err := s.Store().Claim(ctx, jobstore.ClaimParams{Upstream: upstream, Limit: n, Owner: "t", LeaseFor: time.Minute, Now: clk.Now()})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	for _, j := range jobs {
		require.NoError(t, s.Store().Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Now: clk.Now(),
			Result: jobstore.Result{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"object":"chat.completion"}`)}}))
	}
}

func unix(t time.Time) *int64 {
	u := t.Unix()
	return &u
}

// TestOpenAIBatchLifeCycle: an OpenAI batch goes through OpenAI's
// statuses with their timestamps: the create answers validating; then
// in_progress (failed, for a bad input file), finalizing once every
// request has finished, completed a BatchFinalizing later with its
// result files; or cancelling then cancelled; or expired.
func TestOpenAIBatchLifeCycle(t *testing.T) {
	t.Parallel()
	t.Run("completed", openAIBatchCompleted)
	t.Run("failed", openAIBatchFailed)
	t.Run("cancelled", openAIBatchCancelled)
	t.Run("expired", openAIBatchExpired)
}

func openAIBatchCompleted(t *testing.T) {
	t.Parallel()
	s, clk := providerService(t, nil, func(c *jobsapi.Config) { c.BatchFinalizing = 30 * time.Second })
	b := createOpenAIBatch(t, s, openAILines(3))
	require.Equal(t, llm.OpenAIBatchValidating, b.Status, "the create answers before its validation")
	require.Nil(t, b.InProgressAt)
	require.Equal(t, jobsapi.OpenAICounts{}, b.RequestCounts, "nothing counted while validating")
	require.Equal(t, providerT0.Unix(), b.CreatedAt)
	require.Equal(t, providerT0.Add(24*time.Hour).Unix(), b.ExpiresAt)

	clk.Advance(time.Minute)
	got := getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchInProgress, got.Status)
	require.Equal(t, unix(providerT0), got.InProgressAt, "validated in the create")
	require.Equal(t, jobsapi.OpenAICounts{Total: 3}, got.RequestCounts)
	finishJobs(t, s, clk, "gpt", 2)
	got = getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchInProgress, got.Status)
	require.Equal(t, jobsapi.OpenAICounts{Total: 3, Completed: 2}, got.RequestCounts, "counted as they finish")

	clk.Advance(time.Minute)
	done := clk.Now()
	finishJobs(t, s, clk, "gpt", 1)
	got = getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchFinalizing, got.Status)
	require.Equal(t, unix(done), got.FinalizingAt)
	require.Nil(t, got.CompletedAt)
	require.Nil(t, got.OutputFileID, "no result file while finalizing")
	code, _ := providerCall(t, s, "gpt", http.MethodGet, "/v1/files/file-"+b.ID+"-output/content", nil, "")
	require.Equal(t, http.StatusNotFound, code, "the output file is not there yet")

	clk.Advance(30 * time.Second)
	got = getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchCompleted, got.Status)
	require.Equal(t, unix(done), got.FinalizingAt)
	require.Equal(t, unix(done.Add(30*time.Second)), got.CompletedAt)
	require.Equal(t, jobsapi.OpenAICounts{Total: 3, Completed: 3}, got.RequestCounts)
	require.NotNil(t, got.OutputFileID)
	require.Nil(t, got.ErrorFileID)
	code, content := providerCall(t, s, "gpt", http.MethodGet, "/v1/files/"+*got.OutputFileID+"/content", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 3, strings.Count(string(content), "\n"))
	code, body := providerCall(t, s, "gpt", http.MethodPost, "/v1/batches/"+b.ID+"/cancel", nil, "")
	require.Equal(t, http.StatusBadRequest, code, string(body))
	require.Contains(t, string(body), "Cannot cancel a batch with status 'completed'.")
}

func openAIBatchFailed(t *testing.T) {
	t.Parallel()
	s, clk := providerService(t, nil, nil)
	b := createOpenAIBatch(t, s, openAILines(1)+"not json\n")
	require.Equal(t, llm.OpenAIBatchValidating, b.Status, "a bad file fails after the create, as OpenAI's do")
	require.Nil(t, b.Errors)
	clk.Advance(time.Second)
	got := getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchFailed, got.Status)
	require.Equal(t, unix(providerT0), got.FailedAt)
	require.Nil(t, got.InProgressAt)
	require.NotNil(t, got.Errors)
	require.Len(t, got.Errors.Data, 1)
	require.Equal(t, 2, *got.Errors.Data[0].Line)
	require.Equal(t, jobsapi.OpenAICounts{}, got.RequestCounts)
}

func openAIBatchCancelled(t *testing.T) {
	t.Parallel()
	s, clk := providerService(t, nil, nil)
	b := createOpenAIBatch(t, s, openAILines(3))
	finishJobs(t, s, clk, "gpt", 1)
	clk.Advance(time.Minute)
	code, body := providerCall(t, s, "gpt", http.MethodPost, "/v1/batches/"+b.ID+"/cancel", nil, "")
	require.Equal(t, http.StatusOK, code, string(body))
	c := decode[jobsapi.OpenAIBatch](t, body)
	require.Equal(t, llm.OpenAIBatchCancelling, c.Status, "the cancel answers cancelling")
	require.Equal(t, unix(clk.Now()), c.CancellingAt)
	require.Nil(t, c.CancelledAt)
	require.Nil(t, c.OutputFileID)
	got := getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchCancelled, got.Status)
	require.Equal(t, unix(clk.Now()), got.CancelledAt)
	require.Nil(t, got.CompletedAt)
	require.Equal(t, jobsapi.OpenAICounts{Total: 3, Completed: 1}, got.RequestCounts)
	require.NotNil(t, got.OutputFileID)
	require.NotNil(t, got.ErrorFileID, "the canceled requests")
}

func openAIBatchExpired(t *testing.T) {
	t.Parallel()
	s, clk := providerService(t, nil, nil)
	b := createOpenAIBatch(t, s, openAILines(2))
	finishJobs(t, s, clk, "gpt", 1)
	clk.Advance(25 * time.Hour)
	res, err := s.Store().Rescue(context.Background(), jobstore.RescueParams{MaxStalls: 3, Now: clk.Now()})
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
	got := getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchExpired, got.Status)
	require.Equal(t, unix(clk.Now()), got.ExpiredAt)
	require.Equal(t, jobsapi.OpenAICounts{Total: 2, Completed: 1, Failed: 1}, got.RequestCounts)
	require.NotNil(t, got.OutputFileID)
	require.NotNil(t, got.ErrorFileID)
	code, content := providerCall(t, s, "gpt", http.MethodGet, "/v1/files/"+*got.ErrorFileID+"/content", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(content), `"code":"batch_expired"`)
}

// TestOpenAIBatchLimits: an OpenAI upstream takes OpenAI's limits, not
// Anthropic's: an input file over MaxOpenAIBatchBytes is refused at its
// upload as OpenAI refuses it (400, "File is too large."), with or
// without Content-Length, and one of more than MaxOpenAIBatchJobs
// requests makes a batch that fails its validation (too_many_tasks).
func TestOpenAIBatchLimits(t *testing.T) {
	t.Parallel()
	three := openAILines(3)
	s, clk := providerService(t, nil, func(c *jobsapi.Config) {
		c.MaxOpenAIBatchJobs, c.MaxOpenAIBatchBytes = 2, int64(len(three))
	})
	require.Equal(t, jobsapi.MaxOpenAIBatchJobsDefault, 50_000)
	require.Equal(t, jobsapi.MaxOpenAIBatchBytesDefault, 200<<20)

	code, body := uploadBatchFile(t, s, three)
	require.Equal(t, http.StatusOK, code, "exactly the cap: %s", body)
	b := createOpenAIBatch(t, s, three)
	clk.Advance(time.Second)
	got := getOpenAIBatch(t, s, b.ID)
	require.Equal(t, llm.OpenAIBatchFailed, got.Status)
	require.Len(t, got.Errors.Data, 1)
	require.Equal(t, "too_many_tasks", got.Errors.Data[0].Code)
	require.Equal(t, "The batch input file has 3 requests; the limit is 2.", got.Errors.Data[0].Message)
	require.Nil(t, got.Errors.Data[0].Line)

	for _, chunked := range []bool{false, true} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		require.NoError(t, mw.WriteField("purpose", "batch"))
		fw, err := mw.CreateFormFile("file", "in.jsonl")
		require.NoError(t, err)
		_, err = fw.Write([]byte(three + " "))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		req := httptest.NewRequest(http.MethodPost, "/gpt/v1/files", &buf)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		if chunked {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		s.api.ServeProvider(rec, req, "gpt", "/v1/files")
		require.Equal(t, http.StatusBadRequest, rec.Code, "chunked %v: %s", chunked, rec.Body)
		require.JSONEq(t, `{"error":{"message":"File is too large.","type":"invalid_request_error","param":null,"code":null}}`, rec.Body.String())
	}
	code, body = providerCall(t, s, "gpt", http.MethodGet, "/v1/files", nil, "")
	require.Equal(t, http.StatusOK, code)
	var files struct {
		Data []jobsapi.OpenAIFile `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &files))
	require.Len(t, files.Data, 2, "the two files at the cap, not the ones over it")
}
