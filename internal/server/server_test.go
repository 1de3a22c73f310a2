package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

const (
	anthropicBody = `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
	openAIBody    = `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`
	upstreamKey   = "sk-upstream-SECRET-0123456789"
)

// fakeEngine answers Do with a function and records the requests.
type fakeEngine struct {
	mu   sync.Mutex
	reqs []*dispatch.Request
	do   func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error)
}

func (f *fakeEngine) Do(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.do == nil {
		return okResponse(`{"ok":true}`), nil
	}
	return f.do(ctx, req)
}

// Acquire and TryAcquire let the job runtime run jobs through the fake:
// each ticket's call is one Do.
func (f *fakeEngine) Acquire(context.Context, dispatch.AcquireParams) (*dispatch.Ticket, error) {
	return dispatch.NewTicketFunc(f.Do), nil
}

func (f *fakeEngine) TryAcquire(dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	return dispatch.NewTicketFunc(f.Do), true
}

func (f *fakeEngine) calls() []*dispatch.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*dispatch.Request(nil), f.reqs...)
}

func okResponse(body string) *dispatch.Response {
	return &dispatch.Response{
		Response: &http.Response{
			StatusCode: http.StatusOK,
			Header:     http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_up"}},
			Body:       io.NopCloser(strings.NewReader(body)),
		},
		QueueWait: 1500 * time.Millisecond,
		Attempts:  2,
	}
}

// testServer is a Server with fake engines for upstreams "a" (anthropic)
// and "o" (openai), both also pointing at a recording upstream for
// pass-through requests.
type testServer struct {
	srv      *Server
	http     *httptest.Server
	a, o     *fakeEngine
	upstream *recordingUpstream
	clock    *clock.Fake
}

type recordingUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	paths   []string
}

func (u *recordingUpstream) last() (string, http.Header) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.paths) == 0 {
		return "", nil
	}
	return u.paths[len(u.paths)-1], u.headers[len(u.headers)-1]
}

func newRecordingUpstream(t *testing.T) *recordingUpstream {
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.paths = append(u.paths, r.URL.RequestURI())
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":[{"id":"model-1"}]}`))
	}))
	t.Cleanup(u.Close)
	return u
}

func newTestServer(t *testing.T, clients []clients.Config, mutate ...func(*Config)) *testServer {
	t.Helper()
	return newLoggedTestServer(t, clients, discardLogger(), mutate...)
}

// newLoggedTestServer is newTestServer writing its logs to log.
func newLoggedTestServer(t *testing.T, clients []clients.Config, log *slog.Logger, mutate ...func(*Config)) *testServer {
	t.Helper()
	ts := &testServer{a: &fakeEngine{}, o: &fakeEngine{}, upstream: newRecordingUpstream(t),
		clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	cfg := Config{
		Upstreams: []upcfg.Config{
			{Name: "a", Protocol: llm.Anthropic, BaseURL: ts.upstream.URL, APIKey: upstreamKey},
			{Name: "o", Protocol: llm.OpenAI, BaseURL: ts.upstream.URL + "/base", APIKey: upstreamKey},
		},
		Clients:      clients,
		MaxBodyBytes: 4096,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := New(cfg, withEngine("a", ts.a), withEngine("o", ts.o), WithClock(ts.clock),
		WithLogger(log))
	require.NoError(t, err)
	ts.srv = srv
	ts.http = httptest.NewServer(srv.Handler())
	t.Cleanup(ts.http.Close)
	return ts
}

// httpReply is what a test reads from a response: the status and headers,
// taken before do closes the body.
type httpReply struct {
	StatusCode int
	Header     http.Header
}

// do sends a request to the test server, reads and closes the response
// body, and returns the status, headers and body.
func (ts *testServer) do(t *testing.T, method, path, body string, h map[string]string) (httpReply, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.http.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := ts.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return httpReply{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

// requireProviderError checks the body is p's error shape with errType.
func requireProviderError(t *testing.T, p llm.Protocol, body []byte, errType string) string {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &v), "body: %s", body)
	if p == llm.Anthropic {
		require.Equal(t, "error", v.Type, "body: %s", body)
	} else {
		require.Empty(t, v.Type, "OpenAI errors have no top-level type: %s", body)
	}
	require.Equal(t, errType, v.Error.Type, "body: %s", body)
	require.NotEmpty(t, v.Error.Message)
	return v.Error.Message
}

var webClient = []clients.Config{{Name: "web", Key: "client-key-web", DefaultPriority: "high", MaxPriority: "high"}}

func TestAuth(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, webClient)
	for _, tc := range []struct {
		name     string
		path     string
		body     string
		headers  map[string]string
		p        llm.Protocol
		wantCode int
	}{
		{"anthropic missing key", "/a/v1/messages", anthropicBody, nil, llm.Anthropic, 401},
		{"anthropic wrong key", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "nope"}, llm.Anthropic, 401},
		{"openai wrong bearer", "/o/v1/chat/completions", openAIBody, map[string]string{"Authorization": "Bearer nope"}, llm.OpenAI, 401},
		{"passthrough wrong key", "/o/v1/models", "", map[string]string{"Authorization": "Bearer nope"}, llm.OpenAI, 401},
		{"anthropic good key", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "client-key-web"}, llm.Anthropic, 200},
		{"openai good bearer", "/o/v1/chat/completions", openAIBody, map[string]string{"Authorization": "Bearer client-key-web"}, llm.OpenAI, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			method := http.MethodPost
			if tc.body == "" {
				method = http.MethodGet
			}
			resp, body := ts.do(t, method, tc.path, tc.body, tc.headers)
			require.Equal(t, tc.wantCode, resp.StatusCode, "body: %s", body)
			if tc.wantCode == 401 {
				requireProviderError(t, tc.p, body, "authentication_error")
				require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			}
			require.NotContains(t, string(body), upstreamKey)
		})
	}
	for _, r := range append(ts.a.calls(), ts.o.calls()...) {
		require.Equal(t, "web", r.Client)
		require.Empty(t, r.Header.Get("X-Api-Key"))
		require.Empty(t, r.Header.Get("Authorization"))
	}
}

func TestOpenModeClientNames(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	ts.do(t, "POST", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "k1"})
	ts.do(t, "POST", "/a/v1/messages", anthropicBody, map[string]string{"Authorization": "Bearer k2"})
	ts.do(t, "POST", "/a/v1/messages", anthropicBody, nil)
	calls := ts.a.calls()
	require.Len(t, calls, 3)
	require.Regexp(t, `^key-[0-9a-f]{8}$`, calls[0].Client)
	require.Regexp(t, `^key-[0-9a-f]{8}$`, calls[1].Client)
	require.NotEqual(t, calls[0].Client, calls[1].Client)
	require.Equal(t, clients.Anonymous, calls[2].Client)
	require.Equal(t, llm.Normal, calls[0].Priority)
}

func TestUpstreamKeyNeverLeaks(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, webClient)
	// Anthropic pass-through: the upstream sees its own key as x-api-key.
	resp, body := ts.do(t, "GET", "/a/v1/models?limit=5", "", map[string]string{"x-api-key": "client-key-web", "X-Priority": "low",
		"Api-Key": "client-key-web", "X-Sluice-Trace": "t-1"})
	require.Equal(t, 200, resp.StatusCode)
	path, h := ts.upstream.last()
	require.Equal(t, "/v1/models?limit=5", path)
	require.Equal(t, upstreamKey, h.Get("X-Api-Key"))
	require.Equal(t, "2023-06-01", h.Get("Anthropic-Version"), "the pass-through adds the protocol's defaults like the dispatcher")
	for _, k := range []string{"Authorization", "Api-Key", "X-Priority", "X-Sluice-Trace"} {
		require.Empty(t, h.Values(k), "the pass-through cleans headers with the same rules: %s", k)
	}
	require.Equal(t, "1", resp.Header.Get(frontdoor.HeaderAttempts))
	require.NotContains(t, string(body), upstreamKey)
	// OpenAI pass-through: the key goes as a bearer token, under base_url's path.
	resp, _ = ts.do(t, "GET", "/o/v1/models", "", map[string]string{"Authorization": "Bearer client-key-web", "X-Api-Key": "client-key-web"})
	require.Equal(t, 200, resp.StatusCode)
	path, h = ts.upstream.last()
	require.Equal(t, "/base/v1/models", path)
	require.Equal(t, "Bearer "+upstreamKey, h.Get("Authorization"))
	require.Empty(t, h.Get("X-Api-Key"))
	for _, vs := range resp.Header {
		for _, v := range vs {
			require.NotContains(t, v, upstreamKey)
		}
	}
}

func TestPassthroughUpstreamDown(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, func(c *Config) {
		c.Upstreams[0].BaseURL = "http://127.0.0.1:1" // nothing listens on port 1
	})
	resp, body := ts.do(t, "GET", "/a/v1/models", "", nil)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	requireProviderError(t, llm.Anthropic, body, "api_error")
	require.NotContains(t, string(body), upstreamKey)
	require.NotContains(t, string(body), "127.0.0.1:1")
}

func TestRouting(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	for _, tc := range []struct {
		name, method, path, body string
		wantCode                 int
		wantEngine               string // "a", "o" or "" for none
		wantUpstreamPath         string
	}{
		{"anthropic messages", "POST", "/a/v1/messages", anthropicBody, 200, "a", ""},
		{"openai chat", "POST", "/o/v1/chat/completions", openAIBody, 200, "o", ""},
		{"anthropic count_tokens passes through", "POST", "/a/v1/messages/count_tokens", anthropicBody, 200, "", "/v1/messages/count_tokens"},
		{"chat path on anthropic upstream is refused", "POST", "/a/v1/chat/completions", openAIBody, 404, "", ""},
		{"GET messages passes through", "GET", "/a/v1/messages", "", 200, "", "/v1/messages"},
		{"openai models", "GET", "/o/v1/models", "", 200, "", "/base/v1/models"},
		{"unknown upstream", "POST", "/zzz/v1/messages", anthropicBody, 404, "", ""},
		{"root", "GET", "/", "", 404, "", ""},
		{"healthz", "GET", "/healthz", "", 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Subtests share the engines; count calls by request body.
			marker := fmt.Sprintf("%s %s", tc.method, tc.path)
			_ = marker
			resp, body := ts.do(t, tc.method, tc.path, tc.body, nil)
			require.Equal(t, tc.wantCode, resp.StatusCode, "body: %s", body)
			if tc.wantCode == 404 {
				var v struct {
					Error struct{ Type, Message string } `json:"error"`
				}
				require.NoError(t, json.Unmarshal(body, &v))
				require.Equal(t, "not_found_error", v.Error.Type)
			}
			if tc.wantUpstreamPath != "" {
				require.Equal(t, `{"data":[{"id":"model-1"}]}`, string(body))
			}
			if tc.wantEngine != "" {
				require.Equal(t, `{"ok":true}`, string(body))
				require.Equal(t, "1500", resp.Header.Get(frontdoor.HeaderQueueMS))
				require.Equal(t, "2", resp.Header.Get(frontdoor.HeaderAttempts))
			}
		})
	}
}

// TestForeignEndpointRefused: the other protocol's endpoint on an upstream
// (a client pointed at the wrong one) is answered 404 in the upstream's own
// error shape naming the right path, and never reaches the provider.
func TestForeignEndpointRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, body string
		p          llm.Protocol
		want       string
	}{
		{"/a/v1/chat/completions", openAIBody, llm.Anthropic, "upstream a speaks the Anthropic Messages API: POST /a/v1/messages"},
		{"/a/v1/responses", `{"model":"m","input":"hi"}`, llm.Anthropic, "POST /a/v1/messages"},
		{"/o/v1/messages", anthropicBody, llm.OpenAI, "upstream o speaks the OpenAI API (Chat Completions, Responses, Embeddings): POST /o/v1/chat/completions, /o/v1/responses, /o/v1/embeddings"},
		{"/o/v1/messages?beta=true", anthropicBody, llm.OpenAI, "POST /o/v1/chat/completions"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, nil)
			resp, body := ts.do(t, "POST", tc.path, tc.body, nil)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "body: %s", body)
			msg := requireProviderError(t, tc.p, body, provider.ErrorTypeFor(tc.p, http.StatusNotFound))
			require.Contains(t, msg, tc.want)
			require.NotEmpty(t, resp.Header.Get(frontdoor.HeaderRequestID))
			got, _ := ts.upstream.last()
			require.Empty(t, got, "the request reached the provider")
			require.Empty(t, append(ts.a.calls(), ts.o.calls()...), "the request reached an engine")
		})
	}
}

func TestScheduledRequestFields(t *testing.T) {
	t.Parallel()
	clients := []clients.Config{
		{Name: "web", Key: "kw", DefaultPriority: "high", MaxPriority: "high"},
		{Name: "ops", Key: "ko", DefaultPriority: "normal", MaxPriority: "critical"},
	}
	ts := newTestServer(t, clients)
	now := ts.clock.Now()
	for _, tc := range []struct {
		name         string
		headers      map[string]string
		wantPriority llm.Priority
		wantDeadline time.Time
	}{
		{"client default", map[string]string{"x-api-key": "kw"}, llm.High, time.Time{}},
		{"capped by max", map[string]string{"x-api-key": "kw", "X-Priority": "critical"}, llm.High, time.Time{}},
		{"lower allowed", map[string]string{"x-api-key": "kw", "X-Priority": "3"}, llm.Low, time.Time{}},
		{"ops critical", map[string]string{"x-api-key": "ko", "X-Priority": "Critical"}, llm.Critical, time.Time{}},
		{"duration deadline", map[string]string{"x-api-key": "ko", "X-Sluice-Deadline": "45s"}, llm.Normal, now.Add(45 * time.Second)},
		{"rfc3339 deadline", map[string]string{"x-api-key": "ko", "X-Sluice-Deadline": "2026-03-01T13:00:00Z"}, llm.Normal, now.Add(time.Hour)},
		{"stainless timeout", map[string]string{"x-api-key": "ko", "X-Stainless-Timeout": "600"}, llm.Normal, now.Add(10 * time.Minute)},
		{"sluice deadline wins", map[string]string{"x-api-key": "ko", "X-Stainless-Timeout": "600", "X-Sluice-Deadline": "5s"}, llm.Normal, now.Add(5 * time.Second)},
		{"bad stainless ignored", map[string]string{"x-api-key": "ko", "X-Stainless-Timeout": "soon"}, llm.Normal, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng := &fakeEngine{}
			srv, err := New(ts.srv.cfg, withEngine("a", eng), withEngine("o", &fakeEngine{}), WithClock(ts.clock), WithLogger(discardLogger()))
			require.NoError(t, err)
			h := httptest.NewServer(srv.Handler())
			defer h.Close()
			req, err := http.NewRequestWithContext(t.Context(), "POST", h.URL+"/a/v1/messages", strings.NewReader(anthropicBody))
			require.NoError(t, err)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			req.Header.Set("anthropic-version", "2023-06-01")
			resp, err := h.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			calls := eng.calls()
			require.Len(t, calls, 1)
			r := calls[0]
			require.Equal(t, tc.wantPriority, r.Priority)
			require.True(t, tc.wantDeadline.Equal(r.Deadline), "deadline %v, want %v", r.Deadline, tc.wantDeadline)
			require.Equal(t, "/v1/messages", r.Path)
			require.Equal(t, anthropicBody, string(r.Body))
			require.Equal(t, "claude-x", r.Cost.Model)
			require.Equal(t, int64(64), r.Cost.OutputTokens)
			require.Equal(t, "2023-06-01", r.Header.Get("Anthropic-Version"))
			require.Empty(t, r.Header.Get("X-Priority"))
			require.Empty(t, r.Header.Get("X-Sluice-Deadline"))
			require.Empty(t, r.Header.Get("X-Api-Key"))
		})
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	big := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	for _, tc := range []struct {
		name     string
		path     string
		body     string
		headers  map[string]string
		p        llm.Protocol
		wantCode int
		wantType string
	}{
		{"anthropic too large", "/a/v1/messages", big, nil, llm.Anthropic, 413, "request_too_large"},
		{"openai too large", "/o/v1/chat/completions", big, nil, llm.OpenAI, 413, "invalid_request_error"},
		{"not json", "/a/v1/messages", "{", nil, llm.Anthropic, 400, "invalid_request_error"},
		{"missing max_tokens", "/a/v1/messages", `{"model":"m","messages":[]}`, nil, llm.Anthropic, 400, "invalid_request_error"},
		{"openai not object", "/o/v1/chat/completions", `[1]`, nil, llm.OpenAI, 400, "invalid_request_error"},
		{"bad priority", "/a/v1/messages", anthropicBody, map[string]string{"X-Priority": "urgent"}, llm.Anthropic, 400, "invalid_request_error"},
		{"bad priority openai", "/o/v1/chat/completions", openAIBody, map[string]string{"X-Priority": "9"}, llm.OpenAI, 400, "invalid_request_error"},
		{"bad deadline", "/a/v1/messages", anthropicBody, map[string]string{"X-Sluice-Deadline": "tomorrow"}, llm.Anthropic, 400, "invalid_request_error"},
		{"negative deadline", "/a/v1/messages", anthropicBody, map[string]string{"X-Sluice-Deadline": "-5s"}, llm.Anthropic, 400, "invalid_request_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := ts.do(t, "POST", tc.path, tc.body, tc.headers)
			require.Equal(t, tc.wantCode, resp.StatusCode, "body: %s", body)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
			requireProviderError(t, tc.p, body, tc.wantType)
		})
	}
	require.Empty(t, ts.a.calls(), "bad requests must not reach the engine")
	require.Empty(t, ts.o.calls())
}

func TestDispatchErrorRendering(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		p            llm.Protocol
		err          *dispatch.Error
		wantCode     int
		wantType     string
		wantRetry    string
		wantRetryMS  string
		wantAttempts string
		wantQueueMS  string
	}{
		{"anthropic rate", llm.Anthropic, &dispatch.Error{Reason: dispatch.ErrShed, Status: 429, Type: "rate_limit_error", Message: "predicted wait 40s exceeds deadline", RetryAfter: 2500 * time.Millisecond, Attempts: 0, QueueWait: 0},
			429, "rate_limit_error", "3", "2500", "0", "0"},
		{"anthropic overloaded", llm.Anthropic, &dispatch.Error{Reason: dispatch.ErrRetriesExhausted, Status: 529, Type: "overloaded_error", Message: "Overloaded", RetryAfter: 300 * time.Millisecond, Attempts: 4, QueueWait: 1234 * time.Millisecond},
			529, "overloaded_error", "1", "300", "4", "1234"},
		{"openai deadline no hint", llm.OpenAI, &dispatch.Error{Reason: dispatch.ErrDeadline, Status: 504, Message: "deadline exceeded", Attempts: 1},
			504, "server_error", "", "", "1", "0"},
		{"openai too large", llm.OpenAI, &dispatch.Error{Reason: dispatch.ErrTooLarge, Status: 413, Type: "invalid_request_error", Message: "too large"},
			413, "invalid_request_error", "", "", "0", "0"},
		{"missing status", llm.Anthropic, &dispatch.Error{Reason: dispatch.ErrUnavailable},
			503, "overloaded_error", "", "", "0", "0"},
		{"shutting down", llm.OpenAI, &dispatch.Error{Reason: dispatch.ErrStopped, Message: "the gateway is shutting down"},
			503, "server_error", "1", "1000", "0", "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, nil)
			eng, path, body := ts.a, "/a/v1/messages", anthropicBody
			if tc.p == llm.OpenAI {
				eng, path, body = ts.o, "/o/v1/chat/completions", openAIBody
			}
			eng.do = func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
				return nil, fmt.Errorf("doing: %w", tc.err)
			}
			resp, out := ts.do(t, "POST", path, body, nil)
			require.Equal(t, tc.wantCode, resp.StatusCode)
			msg := requireProviderError(t, tc.p, out, tc.wantType)
			if tc.err.Message != "" {
				require.Equal(t, tc.err.Message, msg)
			}
			require.Equal(t, tc.wantRetry, resp.Header.Get("Retry-After"))
			require.Equal(t, tc.wantRetryMS, resp.Header.Get("Retry-After-Ms"))
			// Only a shutdown invites a retry: nothing was sent, another
			// instance can take it.
			require.Equal(t, strconv.FormatBool(errors.Is(tc.err, dispatch.ErrStopped)), resp.Header.Get("X-Should-Retry"))
			require.Equal(t, tc.wantAttempts, resp.Header.Get(frontdoor.HeaderAttempts))
			require.Equal(t, tc.wantQueueMS, resp.Header.Get(frontdoor.HeaderQueueMS))
		})
	}
}

func TestTerminalUpstreamErrorPassThrough(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	ts.a.do = func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return &dispatch.Response{Response: &http.Response{
			StatusCode: 429,
			Header:     http.Header{"Content-Type": {"application/json"}, "X-Should-Retry": {"true"}, "Connection": {"x-hop"}, "X-Hop": {"1"}},
			Body:       io.NopCloser(strings.NewReader(`{"type":"error","error":{"type":"rate_limit_error","message":"spend cap"}}`)),
		}, Attempts: 1}, nil
	}
	resp, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, nil)
	require.Equal(t, 429, resp.StatusCode)
	require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	require.Empty(t, resp.Header.Get("X-Hop"))
	require.Contains(t, string(body), "spend cap")
}

func TestEngineUnexpectedError(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	ts.o.do = func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return nil, fmt.Errorf("dial tcp: connection refused (key %s)", upstreamKey)
	}
	resp, body := ts.do(t, "POST", "/o/v1/chat/completions", openAIBody, nil)
	require.Equal(t, 502, resp.StatusCode)
	requireProviderError(t, llm.OpenAI, body, "server_error")
	require.NotContains(t, string(body), upstreamKey)
}

func TestStatusAndMetrics(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	ts.do(t, "POST", "/a/v1/messages", anthropicBody, nil)
	ts.do(t, "POST", "/a/v1/messages", "{", nil)
	obs := ts.srv.view.Observer("a")
	obs.Admitted(llm.High, 2*time.Second)
	obs.Attempted(llm.Overload, 529, 300*time.Millisecond)
	obs.Retried(llm.Overload)
	obs.Shed(llm.Low, fmt.Errorf("x: %w", dispatch.ErrDeadline))
	obs.BreakerStateChanged(flow.Closed, flow.Open)
	obs.Reconciled(provider.Cost{InputTokens: 10, OutputTokens: 64}, llm.Usage{InputTokens: 8, OutputTokens: 3})
	resp, body := ts.do(t, "GET", "/metrics", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	for _, want := range []string{
		`sluice_requests_total{client="default",endpoint="chat",outcome="success",priority="normal",upstream="a"} 1`,
		`sluice_requests_total{client="default",endpoint="chat",outcome="bad_request",priority="unknown",upstream="a"} 1`,
		`sluice_upstream_attempts_total{class="overload",status="529",upstream="a"} 1`,
		`sluice_retries_total{reason="overload",upstream="a"} 1`,
		`sluice_shed_total{reason="deadline",upstream="a"} 1`,
		`sluice_breaker_transitions_total{to="open",upstream="a"} 1`,
		`sluice_queue_wait_seconds_count{priority="high",upstream="a"} 1`,
		`sluice_upstream_latency_seconds_count{upstream="a"} 1`,
		`sluice_tokens_total{direction="output",kind="reserved",upstream="a"} 64`,
	} {
		require.Contains(t, string(body), want)
	}
	resp, body = ts.do(t, "GET", "/v1/status", "", nil)
	require.Equal(t, 200, resp.StatusCode)
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.Len(t, st.Upstreams, 2)
	require.Equal(t, "a", st.Upstreams[0].Name)
	require.NotContains(t, string(body), upstreamKey)
}

func TestStatusNeedsClientKey(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, webClient)
	resp, _ := ts.do(t, "GET", "/v1/status", "", nil)
	require.Equal(t, 401, resp.StatusCode)
	resp, _ = ts.do(t, "GET", "/v1/status", "", map[string]string{"x-api-key": "client-key-web"})
	require.Equal(t, 200, resp.StatusCode)
}

// FuzzScheduledRequest throws random bodies and header values at the
// scheduled routes: the handler must never panic, and must either hand the
// request to the engine or answer a JSON error in the provider's shape.
func FuzzScheduledRequest(f *testing.F) {
	f.Add(true, anthropicBody, "high", "30s")
	f.Add(false, openAIBody, "0", "2026-03-01T13:00:00Z")
	f.Add(false, `{"model":"m","stream":true,"messages":[],"stream_options":null}`, "", "")
	f.Add(true, `{"model":"m","max_tokens":-1,"messages":[]}`, "9", "-1s")
	f.Add(true, "\x00{", "urgent", "tomorrow")
	f.Add(false, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"n":3}`, "LOW", "1h")
	f.Fuzz(func(t *testing.T, anthropic bool, body, priority, deadline string) {
		eng := &fakeEngine{}
		p, path, name := llm.OpenAI, "/o/v1/chat/completions", "o"
		if anthropic {
			p, path, name = llm.Anthropic, "/a/v1/messages", "a"
		}
		srv, err := New(Config{
			Upstreams:    []upcfg.Config{{Name: name, Protocol: p, APIKey: "k"}},
			MaxBodyBytes: 2048,
		}, withEngine(name, eng), WithLogger(discardLogger()))
		require.NoError(t, err)
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		if !validHeaderValue(priority) || !validHeaderValue(deadline) {
			return
		}
		req.Header.Set("X-Priority", priority)
		req.Header.Set("X-Sluice-Deadline", deadline)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if len(eng.calls()) == 1 {
			require.Equal(t, 200, rec.Code)
			return
		}
		require.Contains(t, []int{400, 413}, rec.Code, "body: %s", rec.Body)
		require.True(t, json.Valid(rec.Body.Bytes()), "body: %s", rec.Body)
		requireProviderError(t, p, rec.Body.Bytes(), provider.ErrorTypeFor(p, rec.Code))
	})
}

func validHeaderValue(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00") && bytes.Equal([]byte(strings.TrimSpace(v)), []byte(v)) || v == ""
}

// TestPassthroughChunkedBodyTooLarge: a pass-through body sent without a
// length (chunked) that outgrows max_body_bytes on its way is answered
// 413, not as a gateway failure an SDK would retry.
func TestPassthroughChunkedBodyTooLarge(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	big := strings.Repeat("x", 3*4096)
	req, err := http.NewRequestWithContext(t.Context(), "POST", ts.http.URL+"/a/v1/files", io.MultiReader(strings.NewReader(big)))
	require.NoError(t, err)
	req.ContentLength = -1 // chunked
	resp, err := ts.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(body))
	require.Equal(t, "false", resp.Header.Get("X-Should-Retry"))
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "request_too_large"), "max_body_bytes")
}
