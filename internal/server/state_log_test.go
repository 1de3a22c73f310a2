package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestStateChangesLoggedOnce checks that what an upstream learns or meets
// is logged once, when it happens, not per request: three requests
// teach the limits once, and a 429 with a hint logs one pause; no line
// holds a configured secret.
func TestStateChangesLoggedOnce(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Limits: mock.Limits{RPM: 6000, ITPM: 1_000_000},
		OutputTokens: mock.OutputRange{Min: 2, Max: 2}, Seed: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	// A provider that answers its first call with a 429 and a hint.
	var calls atomic.Int32
	rate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("retry-after", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`))
			return
		}
		m.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(rate.Close)

	log, buf := capturedLogger(0)
	const clientKey, secondKey = "ck-web-SECRET-1", "ck-web-SECRET-2"
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{
			{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: upstreamKey},
			{Name: "limited", Protocol: llm.Anthropic, BaseURL: rate.URL, APIKey: "sk-ant-OTHER-SECRET"},
		},
		Clients: []clients.Config{{Name: "web", Key: clientKey}, {Name: "batch", Key: secondKey}}},
		WithLogger(log))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	const req = `{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`
	for range 3 {
		code, body := call(t, "POST", base+"/claude/v1/messages", clientKey, req)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	buf.waitLines(t, "request", 3)
	learned := buf.lines(t, "limit learned from headers")
	dims := map[string]int{}
	for _, l := range learned {
		require.Equal(t, "claude", l["upstream"])
		dims[l["dimension"].(string)]++
	}
	require.Equal(t, 1, dims["requests"], "%v", learned)
	require.Equal(t, 1, dims["input_tokens"], "%v", learned)
	for d, n := range dims {
		require.Equal(t, 1, n, "dimension %s learned %d times", d, n)
	}

	code, body := call(t, "POST", base+"/limited/v1/messages", secondKey, req)
	require.Equal(t, http.StatusOK, code, string(body))
	paused := buf.waitLines(t, "upstream paused by a 429", 1)
	require.Len(t, paused, 1)
	require.Equal(t, "limited", paused[0]["upstream"])
	require.Equal(t, "provider", paused[0]["hint"])
	require.InDelta(t, 1000, paused[0]["pause_ms"], 1)
	require.NotEmpty(t, paused[0]["key"])

	out := buf.String()
	for _, secret := range []string{upstreamKey, "sk-ant-OTHER-SECRET", clientKey, secondKey} {
		require.NotContains(t, out, secret)
	}
}

// TestStateLogLevels: a breaker opening is a warning, its other moves
// info; each line names the upstream.
func TestStateLogLevels(t *testing.T) {
	t.Parallel()
	log, buf := capturedLogger(slog.LevelDebug)
	s := stateLog{log: log, upstream: "claude"}
	s.BreakerChanged(flow.Closed, flow.Open)
	s.BreakerChanged(flow.Open, flow.HalfOpen)
	s.BreakerChanged(flow.HalfOpen, flow.Closed)
	s.KeyOut("fp_1", "401 authentication_error", time.Minute)
	s.KeyBack("fp_1", 90*time.Second)
	for msg, level := range map[string]string{"breaker open": "WARN", "breaker half_open": "INFO", "breaker closed": "INFO",
		"key taken out of the pool": "WARN", "key back in the pool": "INFO"} {
		lines := buf.lines(t, msg)
		require.Len(t, lines, 1, msg)
		require.Equal(t, level, lines[0]["level"], msg)
		require.Equal(t, "claude", lines[0]["upstream"], msg)
	}
}
