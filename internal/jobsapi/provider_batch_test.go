package jobsapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
)

// The providers' batch APIs as the API answers them, on a fake clock and
// a runtime that is not started: the tests move the batches' jobs through
// the store themselves, at the times they choose.

var providerT0 = time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC)

// providerService is a manual runtime on a fake clock, with edit tuning
// the API's config.
func providerService(t *testing.T, d *fakeDispatcher, edit func(*jobsapi.Config)) (*testService, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(providerT0)
	if d == nil {
		d = succeed()
	}
	s := newService(t, nil, d, nil, func(c *config) {
		c.Owner, c.Clock = "manual", clk
		if edit != nil {
			edit(&c.API)
		}
	})
	return s, clk
}

// providerCall sends one request to upstream's provider route path.
func providerCall(t *testing.T, s *testService, upstream, method, path string, body []byte, contentType string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, "/"+upstream+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	require.True(t, s.api.ServesProvider(upstream, method, path), "%s %s", method, path)
	s.api.ServeProvider(rec, req, upstream, path)
	return rec.Code, rec.Body.Bytes()
}

// messageBatchBody is a Message Batches create of the requests given as
// "custom_id": params pairs, in order.
func messageBatchBody(reqs ...string) []byte {
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := 0; i+1 < len(reqs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"custom_id":%q,"params":%s}`, reqs[i], reqs[i+1])
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// TestMessageBatchParamsRefusedAsResults: a request whose params the
// provider would refuse does not fail the create: it is the batch's
// errored result, with Anthropic's invalid_request_error, counted in
// request_counts.errored and never sent; the others run.
func TestMessageBatchParamsRefusedAsResults(t *testing.T) {
	t.Parallel()
	d := succeed()
	s := newService(t, nil, d, nil, nil)
	noTokens := strings.Replace(anthropicBody, `"max_tokens":16`, `"max_tokens":0`, 1)
	streams := strings.Replace(anthropicBody, `{`, `{"stream":true,`, 1)
	code, body := providerCall(t, s, "claude", http.MethodPost, "/v1/messages/batches",
		messageBatchBody("ok-1", anthropicBody, "no-tokens", noTokens, "streams", streams, "ok-2", anthropicBody), "application/json")
	require.Equal(t, http.StatusOK, code, string(body))
	b := decode[jobsapi.MessageBatch](t, body)
	var got jobsapi.MessageBatch
	require.Eventually(t, func() bool {
		code, body := providerCall(t, s, "claude", http.MethodGet, "/v1/messages/batches/"+b.ID, nil, "")
		require.Equal(t, http.StatusOK, code, string(body))
		got = decode[jobsapi.MessageBatch](t, body)
		return got.ProcessingStatus == "ended"
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, jobsapi.RequestCounts{Succeeded: 2, Errored: 2}, got.RequestCounts)
	require.Equal(t, 2, d.Calls(), "the refused requests were never sent")

	code, body = providerCall(t, s, "claude", http.MethodGet, "/v1/messages/batches/"+b.ID+"/results", nil, "")
	require.Equal(t, http.StatusOK, code, string(body))
	results := map[string]json.RawMessage{}
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var r struct {
			CustomID string          `json:"custom_id"`
			Result   json.RawMessage `json:"result"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		results[r.CustomID] = r.Result
	}
	require.Len(t, results, 4)
	for id, want := range map[string]string{"no-tokens": "max_tokens", "streams": "stream"} {
		var r struct {
			Type  string `json:"type"`
			Error struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(results[id], &r))
		require.Equal(t, "errored", r.Type, id)
		require.Equal(t, "error", r.Error.Type, id)
		require.Equal(t, "invalid_request_error", r.Error.Error.Type, id)
		require.Contains(t, r.Error.Error.Message, want, id)
		require.True(t, strings.HasPrefix(r.Error.RequestID, "req_"), id)
	}
	for _, id := range []string{"ok-1", "ok-2"} {
		require.Contains(t, string(results[id]), `"type":"succeeded"`, id)
	}

	// Only refused requests: the batch has ended when it is made.
	code, body = providerCall(t, s, "claude", http.MethodPost, "/v1/messages/batches", messageBatchBody("x", noTokens), "application/json")
	require.Equal(t, http.StatusOK, code, string(body))
	only := decode[jobsapi.MessageBatch](t, body)
	require.Equal(t, "ended", only.ProcessingStatus)
	require.Equal(t, jobsapi.RequestCounts{Errored: 1}, only.RequestCounts)
	require.Equal(t, 2, d.Calls())
}

// TestMessageBatchCreateRefusals: what Anthropic refuses at the create
// (the body's shape, custom_id, duplicates, the count and size limits) is
// a 400 (413 for the size) in its error shape, and queues nothing.
func TestMessageBatchCreateRefusals(t *testing.T) {
	t.Parallel()
	d := succeed()
	three := messageBatchBody("a", anthropicBody, "b", anthropicBody, "c", anthropicBody)
	s := newService(t, nil, d, nil, func(c *config) { c.API.MaxBatchJobs, c.API.MaxBatchBytes = 2, int64(len(three)) })
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		typ    string
		want   string
	}{
		{"not an object", []byte(`[1]`), 400, "invalid_request_error", "invalid request body"},
		{"no requests", []byte(`{}`), 400, "invalid_request_error", "requests: Field required"},
		{"empty", []byte(`{"requests":[]}`), 400, "invalid_request_error", "requests: List should have at least 1 item after validation, not 0"},
		{"too many", three, 400, "invalid_request_error", "requests: List should have at most 2 items after validation, not 3"},
		{"too large", append(three, ' '), 413, "request_too_large", "Request exceeds the maximum allowed number of bytes."},
		{"custom_id missing", []byte(`{"requests":[{"params":` + anthropicBody + `}]}`), 400, "invalid_request_error", "requests.0.custom_id: Field required"},
		{"custom_id pattern", messageBatchBody("a b", anthropicBody), 400, "invalid_request_error", "requests.0.custom_id: String should match pattern"},
		{"custom_id too long", messageBatchBody(strings.Repeat("a", 65), anthropicBody), 400, "invalid_request_error", "requests.0.custom_id"},
		{"duplicate", messageBatchBody("a", anthropicBody, "a", anthropicBody), 400, "invalid_request_error", "requests.1.custom_id"},
		{"params missing", []byte(`{"requests":[{"custom_id":"a"}]}`), 400, "invalid_request_error", "requests.0.params: Field required"},
		{"params not an object", messageBatchBody("a", `[1]`), 400, "invalid_request_error", "requests.0.params: Input should be a valid dictionary"},
		{"request not an object", []byte(`{"requests":[5]}`), 400, "invalid_request_error", "requests.0: Input should be a valid dictionary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := providerCall(t, s, "claude", http.MethodPost, "/v1/messages/batches", tc.body, "application/json")
			require.Equal(t, tc.status, code, string(body))
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, "error", e.Type)
			require.Equal(t, tc.typ, e.Error.Type)
			require.Contains(t, e.Error.Message, tc.want)
		})
	}
	code, body := providerCall(t, s, "claude", http.MethodGet, "/v1/messages/batches", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, decode[jobsapi.MessageBatchList](t, body).Data, "a refused create queues nothing")
	require.Zero(t, d.Calls())
}
