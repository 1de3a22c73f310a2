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
		times    int // the request is sent this many times; the last answer is checked
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
