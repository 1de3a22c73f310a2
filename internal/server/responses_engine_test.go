package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// overloaded is the answer of a provider too busy to serve a request.
const overloaded = `{"error":{"message":"The server is overloaded. Please try again later.","type":"server_error","param":null,"code":null}}`

// TestResponsesThroughTheEngine: the Responses API meets the engine's
// rules as chat completions do, over HTTP against the mock: a 529 is
// retried (streaming or not) and the client sees one answer; an upstream
// that answers 529 hands the request to its fallback; a client's own rate
// limit holds its second Response and refuses it at its deadline in
// OpenAI's shape, without reaching the provider.
func TestResponsesThroughTheEngine(t *testing.T) {
	t.Parallel()
	const create = `{"model":"gpt-4.1","max_output_tokens":16,"input":"hello"}`
	const stream = `{"model":"gpt-4.1","max_output_tokens":16,"stream":true,"input":"hello"}`
	tests := []struct {
		name     string
		fail     func(n int64) bool // whether the primary answers its nth create (1-based) 529
		key      string
		body     string
		header   map[string]string
		times    int  // the request is sent this many times; the last answer is checked
		fallback bool // the primary has the fallback upstream
		status   int
		upstream string
		attempts string
		creates  int64 // the creates the primary received
	}{
		{"retried after a 529", func(n int64) bool { return n == 1 }, "ck-team", create, nil, 1, false, 200, "primary", "2", 2},
		{"a stream retried after a 529", func(n int64) bool { return n == 1 }, "ck-team", stream, nil, 1, false, 200, "primary", "2", 2},
		// One attempt on the primary, then the fallback's: two in all.
		{"fallback when the primary is overloaded", func(int64) bool { return true }, "ck-team", create, nil, 1, true, 200, "fallback", "2", 1},
		{"a client's rate limit", func(int64) bool { return false }, "ck-slow", create, map[string]string{"X-Sluice-Deadline": "500ms"}, 2, false, 429, "", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := mock.New(mock.Config{OutputTokens: mock.OutputRange{Min: 4, Max: 8}, Seed: 5})
			require.NoError(t, err)
			var creates atomic.Int64
			primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/v1/responses" && tt.fail(creates.Add(1)) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(529)
					_, _ = w.Write([]byte(overloaded))
					return
				}
				m.Handler().ServeHTTP(w, r)
			}))
			t.Cleanup(primary.Close)
			fallback := httptest.NewServer(m.Handler())
			t.Cleanup(fallback.Close)
			retry := upcfg.Retry{BaseDelay: 5 * time.Millisecond, MaxDelay: 10 * time.Millisecond}
			var fallbacks []upcfg.Fallback
			if tt.fallback {
				fallbacks = []upcfg.Fallback{{Upstream: "fallback"}}
			}
			g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
				Clients: []clients.Config{{Name: "team", Key: "ck-team"},
					{Name: "slow", Key: "ck-slow", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60, BurstSeconds: 1}}}},
				Upstreams: []upcfg.Config{
					{Name: "primary", Protocol: llm.OpenAI, BaseURL: primary.URL, APIKey: "sk-p", Retry: retry,
						Limits: upcfg.Limits{RequestsPerMinute: 6000}, Fallbacks: fallbacks},
					{Name: "fallback", Protocol: llm.OpenAI, BaseURL: fallback.URL, APIKey: "sk-f", Retry: retry,
						Limits: upcfg.Limits{RequestsPerMinute: 6000}}}},
				WithLogger(discardLogger()))
			require.NoError(t, err)
			require.NoError(t, g.Start(t.Context()))
			t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
			var resp *http.Response
			var body []byte
			for range tt.times {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/primary/v1/responses", strings.NewReader(tt.body))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+tt.key)
				req.Header.Set("Content-Type", "application/json")
				for k, v := range tt.header {
					req.Header.Set(k, v)
				}
				resp, err = http.DefaultClient.Do(req)
				require.NoError(t, err)
				body = readAll(t, resp)
			}
			require.Equal(t, tt.status, resp.StatusCode, string(body))
			require.Equal(t, tt.creates, creates.Load(), "creates the primary received")
			if tt.status != http.StatusOK {
				msg := requireProviderError(t, llm.OpenAI, body, "rate_limit_error")
				require.Contains(t, msg, "client slow's requests_per_minute (60) on primary")
				require.NotEmpty(t, resp.Header.Get("Retry-After"))
				return
			}
			require.Equal(t, tt.upstream, resp.Header.Get(frontdoor.HeaderUpstream))
			require.Equal(t, tt.attempts, resp.Header.Get(frontdoor.HeaderAttempts))
			if strings.Contains(tt.body, `"stream":true`) {
				require.Contains(t, string(body), "event: response.completed")
				require.NotContains(t, string(body), "overloaded", "the failed attempt never reached the client")
				return
			}
			var r struct {
				Object string `json:"object"`
				Status string `json:"status"`
			}
			require.NoError(t, json.Unmarshal(body, &r), string(body))
			require.Equal(t, "response", r.Object)
			require.Equal(t, "completed", r.Status)
		})
	}
}

// readAll reads and closes resp's body.
func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

// TestResponsesCreatedThroughAFallback: a Response the primary's fallback
// created (the primary overloaded; the fallback another account: its own
// mock, where the primary's key finds nothing) is read, listed, cancelled
// and deleted through the primary's prefix, as the SDK pointed at the
// primary sends them: each goes to the fallback, with its key, and says
// so (x-sluice-upstream). A client that may not use the fallback gets a
// 404 saying why; a Response no upstream knows goes to the primary.
func TestResponsesCreatedThroughAFallback(t *testing.T) {
	t.Parallel()
	primaryMock, err := mock.New(mock.Config{Seed: 5})
	require.NoError(t, err)
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/responses" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			_, _ = w.Write([]byte(overloaded))
			return
		}
		primaryMock.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(primary.Close)
	fallbackMock, err := mock.New(mock.Config{Seed: 6, OutputTokens: mock.OutputRange{Min: 4, Max: 8}, BackgroundQueue: time.Hour})
	require.NoError(t, err)
	fallback := httptest.NewServer(fallbackMock.Handler())
	t.Cleanup(fallback.Close)
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
		Clients: []clients.Config{{Name: "team", Key: "ck-team"},
			{Name: "own", Key: "ck-own", Access: admit.Access{Upstreams: []string{"primary"}}}},
		Upstreams: []upcfg.Config{
			{Name: "primary", Protocol: llm.OpenAI, BaseURL: primary.URL, APIKey: "sk-p", Fallbacks: []upcfg.Fallback{{Upstream: "fallback"}}},
			{Name: "fallback", Protocol: llm.OpenAI, BaseURL: fallback.URL, APIKey: "sk-f"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr() + "/primary/v1/responses"
	do := func(method, url, key, body string) (int, []byte, http.Header) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp.StatusCode, readAll(t, resp), resp.Header
	}
	var created struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	code, body, h := do(http.MethodPost, base, "ck-team", `{"model":"gpt-4.1","max_output_tokens":16,"background":true,"input":"hello"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "fallback", h.Get(frontdoor.HeaderUpstream), "created by the fallback")
	require.NoError(t, json.Unmarshal(body, &created))
	require.Equal(t, "queued", created.Status)

	for _, tc := range []struct {
		method, suffix string
		want           string // a field of the answer
	}{
		{http.MethodGet, "", `"status":"queued"`},
		{http.MethodGet, "/input_items", `"object":"list"`},
		{http.MethodPost, "/cancel", `"status":"cancelled"`},
		{http.MethodDelete, "", `"deleted":true`},
	} {
		code, body, h := do(tc.method, base+"/"+created.ID+tc.suffix, "ck-team", "")
		require.Equal(t, http.StatusOK, code, "%s %s: %s", tc.method, tc.suffix, body)
		require.Equal(t, "fallback", h.Get(frontdoor.HeaderUpstream), "%s %s", tc.method, tc.suffix)
		require.Contains(t, string(body), tc.want, "%s %s", tc.method, tc.suffix)
	}
	code, body, _ = do(http.MethodGet, base+"/"+created.ID, "ck-team", "")
	require.Equal(t, http.StatusNotFound, code, "deleted on the fallback: %s", body)

	// A client that may not use the fallback is told why.
	code, body, h = do(http.MethodPost, base, "ck-team", `{"model":"gpt-4.1","max_output_tokens":16,"input":"again"}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, "fallback", h.Get(frontdoor.HeaderUpstream))
	require.NoError(t, json.Unmarshal(body, &created))
	code, body, _ = do(http.MethodGet, base+"/"+created.ID, "ck-own", "")
	require.Equal(t, http.StatusNotFound, code, string(body))
	msg := requireProviderError(t, llm.OpenAI, body, "invalid_request_error")
	require.Contains(t, msg, "created through upstream fallback (a fallback of primary), which client own may not use")

	// Unknown everywhere: the primary's own answer.
	code, body, h = do(http.MethodGet, base+"/resp_unknown", "ck-team", "")
	require.Equal(t, http.StatusNotFound, code, string(body))
	require.Empty(t, h.Get(frontdoor.HeaderUpstream), "passed through to the primary")
	require.Contains(t, string(body), "resp_unknown")
}
