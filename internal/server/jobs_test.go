package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// testStore is a fresh SQLite job store for one test.
func testStore(t *testing.T) string {
	t.Helper()
	return "sqlite:" + filepath.Join(t.TempDir(), "sluice.db")
}

func call(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestJobsThroughGateway submits jobs and a batch to `sluice serve` (the
// job queue mounted in the gateway, SQLite store) and reads the results
// back, while the mock provider overloads a fifth of the calls.
func TestJobsThroughGateway(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3},
		Faults: mock.Faults{OverloadRate: 0.2}, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}},
		Clients:   []clients.Config{{Name: "batch", Key: "ck-batch"}},
		Jobs:      jobs.Settings{MaxAttempts: 10}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	code, body := call(t, "POST", base+"/v1/jobs", "", `{"upstream":"claude","request":{}}`)
	require.Equal(t, http.StatusUnauthorized, code, string(body))

	code, body = call(t, "POST", base+"/v1/jobs", "ck-batch", `{"upstream":"claude","idempotency_key":"k1",
		"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var job struct {
		ID       json.Number `json:"id"`
		State    string      `json:"state"`
		Client   string      `json:"client"`
		Response *struct {
			Status int       `json:"status"`
			Usage  llm.Usage `json:"usage"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(body, &job))

	code, body = call(t, "GET", base+"/v1/jobs/"+job.ID.String()+"?wait=20s", "ck-batch", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &job))
	require.Equal(t, "succeeded", job.State, string(body))
	require.Equal(t, "batch", job.Client, "the job is the authenticated client's")
	require.Equal(t, 200, job.Response.Status)
	require.Equal(t, int64(3), job.Response.Usage.OutputTokens)

	// The same idempotency key is the same job: no second provider call.
	before := m.Stats().Overall.ByStatus["200"]
	code, body = call(t, "POST", base+"/v1/jobs", "ck-batch", `{"upstream":"claude","idempotency_key":"k1",
		"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"id":`+job.ID.String())
	require.Equal(t, before, m.Stats().Overall.ByStatus["200"])

	var lines []string
	for i := range 20 {
		lines = append(lines, `{"custom_id":"r`+string(rune('a'+i))+`","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`)
	}
	code, body = call(t, "POST", base+"/v1/batches?upstream=claude", "ck-batch", strings.Join(lines, "\n"))
	require.Equal(t, http.StatusOK, code, string(body)) // as Anthropic's batch create
	var batch struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &batch))
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/batches/"+batch.ID, "ck-batch", "")
		return strings.Contains(string(b), `"ended"`)
	}, 30e9, 50e6)
	code, body = call(t, "GET", base+"/v1/batches/"+batch.ID+"/results", "ck-batch", "")
	require.Equal(t, http.StatusOK, code)
	results := strings.Split(strings.TrimSpace(string(body)), "\n")
	require.Len(t, results, 20)
	for _, r := range results {
		require.Contains(t, r, `"type":"succeeded"`)
	}
	require.Positive(t, m.Stats().Overall.ByStatus["529"], "the mock overloaded some calls and the queue retried them")
}

func TestJobsDisabledWithStoreNone(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, APIKey: "sk-up"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	resp, err := http.Post("http://"+g.Addr()+"/v1/jobs", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	// The jobs API's errors carry a request id, header and body, as the proxy's do.
	id := resp.Header.Get(frontdoor.HeaderRequestID)
	require.True(t, strings.HasPrefix(id, "req_sluice_"), "X-Sluice-Request-Id %q", id)
	require.JSONEq(t, `{"type":"error","error":{"type":"unavailable_error","message":"the job queue is disabled (store: none)"},"request_id":"`+id+`"}`, string(body))
}

func TestJobsConfigValidationNamesField(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {retention: {dead: -1h}}\n"), nil)
	require.ErrorContains(t, err, "jobs.retention.dead: must be >= 0")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\nstore: none\njobs: {lease_for: 10ms}\n"), nil)
	require.ErrorContains(t, err, "jobs.lease_for: must be at least 1s")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {webhooks: {base_delay: 1m, max_delay: 1s}}\n"), nil)
	require.ErrorContains(t, err, "jobs.webhooks.max_delay: must be >= webhooks.base_delay")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {retry: {base_delay: 1m, max_delay: 1s}}\n"), nil)
	require.ErrorContains(t, err, "jobs.retry.max_delay: must be >= retry.base_delay")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {max_attempts: 500}\n"), nil)
	require.ErrorContains(t, err, "jobs.max_attempts: must be at most 100")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {webhook_secret: \"whsec_not base64!\"}\n"), nil)
	require.ErrorContains(t, err, "jobs.webhook_secret: ")
	_, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {retry: {base_delay: 1s, jitter: 1s}}\n"), nil)
	require.ErrorContains(t, err, "jobs.retry.jitter: unknown field; the fields here are base_delay, max_delay")
}

// TestJobsRetryFromYAML: jobs.retry sets the requeue backoff, and a zero
// field takes its default.
func TestJobsRetryFromYAML(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {retry: {base_delay: 5s}}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, jobs.Retry{BaseDelay: 5 * time.Second, MaxDelay: jobs.RetryMaxDelayDefault}, cfg.Jobs.Retry)
	cfg, err = ParseConfig([]byte("upstreams: [{name: a, protocol: anthropic, api_key: k}]\njobs: {retry: {base_delay: 10m}}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, jobs.Retry{BaseDelay: 10 * time.Minute, MaxDelay: 10 * time.Minute}, cfg.Jobs.Retry, "a base above the default cap raises it")
}

// TestJobsPriorityCappedByClient: a client limited to normal cannot submit
// critical jobs, as on the proxy routes.
func TestJobsPriorityCappedByClient(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: "http://127.0.0.1:1", APIKey: "sk-up"}},
		Clients: []clients.Config{{Name: "batch", Key: "ck-batch", MaxPriority: "normal"},
			{Name: "web", Key: "ck-web", MaxPriority: "critical", Role: clients.RoleAdmin}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	// Pause the upstream so the jobs stay queued and nothing is sent.
	code, body := call(t, "POST", "http://"+g.Addr()+"/v1/upstreams/claude/pause", "ck-web", "")
	require.Equal(t, http.StatusOK, code, string(body))
	submit := func(key string) string {
		code, body := call(t, "POST", "http://"+g.Addr()+"/v1/jobs", key, `{"upstream":"claude","priority":"critical",
			"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}}`)
		require.Equal(t, http.StatusAccepted, code, string(body))
		var j struct {
			Priority string `json:"priority"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		return j.Priority
	}
	require.Equal(t, "normal", submit("ck-batch"), "capped at the client's max_priority")
	require.Equal(t, "critical", submit("ck-web"))
}
