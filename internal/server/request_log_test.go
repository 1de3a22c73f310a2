package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// logBuffer is a concurrency-safe buffer for a captured JSON log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLines waits for n records whose msg is msg (the line is written
// just after the answer, so the client may read it first) and returns them.
func (b *logBuffer) waitLines(t *testing.T, msg string, n int) []map[string]any {
	t.Helper()
	require.Eventually(t, func() bool { return len(b.lines(t, msg)) >= n }, 10*time.Second, 2*time.Millisecond, b.String())
	return b.lines(t, msg)
}

// lines returns the captured records whose msg is msg.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

func capturedLogger(level slog.Level) (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: level})), b
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	clients := []clients.Config{{Name: "web", Key: "client-key-web-SECRET-42", DefaultPriority: "high", MaxPriority: "high"}}
	const key = "client-key-web-SECRET-42"
	for _, tc := range []struct {
		name   string
		do     func(context.Context, *dispatch.Request) (*dispatch.Response, error)
		key    string
		body   string
		status int
		want   map[string]any
	}{
		{name: "success", key: key, body: anthropicBody, status: 200,
			want: map[string]any{"client": "web", "priority": "high", "status": 200.0, "outcome": "success",
				"queue_ms": 1500.0, "attempts": 2.0, "tokens_in": 0.0, "tokens_out": 0.0}},
		{name: "gave up on a quota shed", key: key, body: anthropicBody, status: 429,
			do: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
				return nil, &dispatch.Error{Reason: dispatch.ErrShed, Status: 429, Type: "rate_limit_error", Message: "shed",
					Attempts: 1, QueueWait: 700_000_000}
			},
			want: map[string]any{"client": "web", "priority": "high", "status": 429.0, "outcome": "gave_up",
				"queue_ms": 700.0, "attempts": 1.0}},
		{name: "bad request", key: key, body: `{"model":`, status: 400,
			want: map[string]any{"client": "web", "priority": "unknown", "status": 400.0, "outcome": "bad_request", "attempts": 0.0}},
		{name: "unauthorized", key: "wrong-key-SECRET-77", body: anthropicBody, status: 401,
			want: map[string]any{"client": "", "priority": "unknown", "status": 401.0, "outcome": "unauthorized"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, buf := capturedLogger(slog.LevelInfo)
			ts := newLoggedTestServer(t, clients, log)
			ts.a.do = tc.do
			resp, out := ts.do(t, "POST", "/a/v1/messages", tc.body, map[string]string{
				"x-api-key": tc.key, "Authorization": "Bearer " + tc.key})
			require.Equal(t, tc.status, resp.StatusCode, string(out))

			id := resp.Header.Get(frontdoor.HeaderRequestID)
			require.True(t, strings.HasPrefix(id, "req_sluice_"), "x-sluice-request-id on every answer: %q", id)
			if calls := ts.a.calls(); tc.status == 200 {
				require.Len(t, calls, 1)
				require.Equal(t, id, calls[0].Header.Get(frontdoor.HeaderRequestID), "the same id goes upstream")
			}

			lines := buf.waitLines(t, "request", 1)
			require.Len(t, lines, 1, buf.String())
			got := lines[0]
			require.Equal(t, "INFO", got["level"])
			require.Equal(t, id, got["request_id"])
			require.Equal(t, "a", got["upstream"])
			for k, v := range tc.want {
				require.Equal(t, v, got[k], k)
			}
			for _, k := range []string{"request_id", "upstream", "client", "priority", "status", "outcome",
				"queue_ms", "attempts", "duration_ms", "tokens_in", "tokens_out"} {
				require.Contains(t, got, k)
			}
			// Never a secret: neither the client's key nor the upstream's.
			for _, secret := range []string{"SECRET", tc.key, upstreamKey, "Bearer"} {
				require.NotContains(t, buf.String(), secret)
			}
		})
	}
}

func TestRequestLogPassthroughAtDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			log, buf := capturedLogger(level)
			ts := newLoggedTestServer(t, nil, log)
			resp, _ := ts.do(t, "GET", "/a/v1/models", "", nil)
			require.Equal(t, 200, resp.StatusCode)
			// A scheduled request after it: once its line is written, the
			// pass-through's would have been too.
			resp, _ = ts.do(t, "POST", "/a/v1/messages", anthropicBody, nil)
			require.Equal(t, 200, resp.StatusCode)
			lines := buf.waitLines(t, "request", 1)
			if level == slog.LevelInfo {
				require.Len(t, lines, 1, buf.String())
				require.Equal(t, "INFO", lines[0]["level"])
				return
			}
			lines = buf.waitLines(t, "request", 2)
			require.Len(t, lines, 2, buf.String())
			i := slices.IndexFunc(lines, func(l map[string]any) bool { return l["level"] == "DEBUG" })
			require.GreaterOrEqual(t, i, 0, buf.String())
			require.Equal(t, "success", lines[i]["outcome"])
			require.NotContains(t, buf.String(), upstreamKey, fmt.Sprint(lines))
		})
	}
}

// TestLogsThroughRealEngine runs a proxied request and a job through the
// real engine on the mock provider: the request line and the job attempt
// line carry the tokens the provider reported, and no key.
func TestLogsThroughRealEngine(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	log, buf := capturedLogger(slog.LevelInfo)
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: upstreamKey}},
		Clients:   []clients.Config{{Name: "batch", Key: "ck-batch-SECRET"}}},
		WithLogger(log))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	const req = `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`

	code, body := call(t, "POST", base+"/claude/v1/messages", "ck-batch-SECRET", req)
	require.Equal(t, http.StatusOK, code, string(body))
	line := buf.waitLines(t, "request", 1)[0]
	require.Equal(t, "success", line["outcome"])
	require.Equal(t, "batch", line["client"])
	require.Equal(t, 200.0, line["status"])
	require.Equal(t, 1.0, line["attempts"])
	require.Equal(t, 3.0, line["tokens_out"])
	require.Greater(t, line["tokens_in"], 0.0)

	code, body = call(t, "POST", base+"/v1/jobs", "ck-batch-SECRET", `{"upstream":"claude","request":`+req+`}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var job struct {
		ID json.Number `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &job))
	att := buf.waitLines(t, "job attempt", 1)[0]
	require.Equal(t, job.ID.String(), fmt.Sprint(att["job_id"]))
	require.Equal(t, "job_"+job.ID.String(), att["request_id"])
	require.Contains(t, att, "queue_ms")
	require.Equal(t, "claude", att["upstream"])
	require.Equal(t, "claude", att["served_by"])
	require.Equal(t, "batch", att["client"])
	require.Equal(t, "low", att["priority"]) // the jobs API's default class
	require.Equal(t, "success", att["outcome"])
	require.Equal(t, 200.0, att["status"])
	require.Equal(t, 1.0, att["attempt"])
	require.Equal(t, 3.0, att["tokens_out"])
	require.Contains(t, att, "duration_ms")
	require.NotContains(t, buf.String(), "SECRET")
}
