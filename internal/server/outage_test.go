package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	upcfg "github.com/sluicehq/sluice/upstream"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
)

// realEngineServer runs the gateway with its real dispatchers on a fake
// clock, for upstreams "a" (Anthropic) and "o" (OpenAI) at base.
func realEngineServer(t *testing.T, base string, mutate func(*upcfg.Config)) (*testServer, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := Config{Upstreams: []upcfg.Config{
		{Name: "a", Protocol: llm.Anthropic, BaseURL: base, APIKey: upstreamKey},
		{Name: "o", Protocol: llm.OpenAI, BaseURL: base, APIKey: upstreamKey},
	}, Store: StoreNone}
	for i := range cfg.Upstreams {
		mutate(&cfg.Upstreams[i])
	}
	srv, err := New(cfg, WithClock(fc), WithLogger(discardLogger()))
	require.NoError(t, err)
	for _, name := range srv.order {
		lc := srv.upstreams[name].engine.(lifecycle.Service)
		require.NoError(t, lc.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, lc.Stop(context.Background())) })
	}
	ts := &testServer{srv: srv, clock: fc, http: httptest.NewServer(srv.Handler())}
	t.Cleanup(ts.http.Close)
	return ts, fc
}

// TestOutagesAnsweredAsOutages: with the breaker open, a request whose
// deadline ends before the next probe is answered at once (the fake clock
// never moves) in the provider's overloaded shape, naming the breaker and
// the last upstream failure, with retry-after at the next probe.
func TestOutagesAnsweredAsOutages(t *testing.T) {
	t.Parallel()
	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"message":"The server is overloaded","type":"server_error","param":null,"code":null}}`))
			return
		}
		w.WriteHeader(529)
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	}))
	t.Cleanup(overloaded.Close)
	ts, fc := realEngineServer(t, overloaded.URL, func(u *upcfg.Config) {
		u.Breaker.ConsecutiveFailures = 1
		u.Breaker.OpenTimeout = time.Minute
		u.Retry.MaxAttempts = 1
	})
	start := fc.Now()
	for _, tt := range []struct {
		route, body, errType string
		p                    llm.Protocol
		status               int
	}{
		{"/a/v1/messages", anthropicBody, "overloaded_error", llm.Anthropic, 529},
		{"/o/v1/chat/completions", openAIBody, "server_error", llm.OpenAI, http.StatusServiceUnavailable},
	} {
		// The first call fails and opens the breaker: already an outage answer.
		r, body := ts.do(t, http.MethodPost, tt.route, tt.body, nil)
		require.Equal(t, tt.status, r.StatusCode, "%s", body)
		requireProviderError(t, tt.p, body, tt.errType)

		r, body = ts.do(t, http.MethodPost, tt.route, tt.body, map[string]string{"X-Sluice-Deadline": "6s"})
		require.Equal(t, tt.status, r.StatusCode, "%s", body)
		msg := requireProviderError(t, tt.p, body, tt.errType)
		require.Contains(t, msg, "circuit breaker open since")
		require.Contains(t, msg, "last upstream failure")
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, secs, 45, "retry-after is the next probe (open 75-125%% of 1m)")
		require.NotEmpty(t, r.Header.Get("Retry-After-Ms"))
		require.Equal(t, "0", r.Header.Get(frontdoor.HeaderQueueMS))
	}
	require.Equal(t, start, fc.Now(), "answered without waiting for the deadline")

	// Every upstream's breaker is open: the gateway is not ready, and says why.
	r, body := ts.do(t, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "%s", body)
	require.Contains(t, string(body), `"name":"upstream a","ok":false,"detail":"breaker open, next probe at`)
}

// TestQuotaWaitPastDeadlineAnswers429 keeps the rate-limit shape for a wait
// that is about quota, not health.
func TestQuotaWaitPastDeadlineAnswers429(t *testing.T) {
	t.Parallel()
	up := newRecordingUpstream(t)
	ts, _ := realEngineServer(t, up.URL, func(u *upcfg.Config) {
		u.Limits.RequestsPerMinute = 1
		u.BurstSeconds = 60
	})
	for _, tt := range []struct {
		route, body string
		p           llm.Protocol
	}{
		{"/a/v1/messages", anthropicBody, llm.Anthropic},
		{"/o/v1/chat/completions", openAIBody, llm.OpenAI},
	} {
		r, body := ts.do(t, http.MethodPost, tt.route, tt.body, nil)
		require.Equal(t, http.StatusOK, r.StatusCode, "%s", body)
		r, body = ts.do(t, http.MethodPost, tt.route, tt.body, map[string]string{"X-Sluice-Deadline": "5s"})
		require.Equal(t, http.StatusTooManyRequests, r.StatusCode, "%s", body)
		requireProviderError(t, tt.p, body, "rate_limit_error")
		require.NotEmpty(t, r.Header.Get("Retry-After"))
	}
}
