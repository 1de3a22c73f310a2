package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the serve goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeSignalCutsStreamsWithAnErrorEvent: `sluice serve` wires its
// signal context (SIGINT/SIGTERM in main) to the server's shutdown, so a
// stream still running when the --grace ends gets Anthropic's error event
// before the connection closes, never a silent end.
func TestServeSignalCutsStreamsWithAnErrorEvent(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a stream longer than the grace
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(dir, "sluice.db")+"\n"+
		"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: "+up.URL+"\n    api_key: sk-up\n"), 0o600))

	ctx, sigterm := context.WithCancel(context.Background())
	defer sigterm()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runMain(ctx, []string{"serve", "--config", cfg, "--grace", "200ms"}, &stdout, &stderr) }()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	base := "http://" + addr.FindStringSubmatch(stdout.String())[1]

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/anthropic/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.Index(data, []byte("\n\n")); i >= 0 {
			return i + 2, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	require.True(t, sc.Scan(), "the first event reached the client")

	sigterm() // what SIGTERM does to main's context
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	require.NoError(t, sc.Err(), "the stream ends cleanly after its error event")
	require.True(t, strings.HasPrefix(last, "event: error\ndata: "), "last event: %q", last)
	require.Contains(t, last, `"type":"overloaded_error"`)
	require.Equal(t, 0, <-code, stderr.String())
	require.Contains(t, stdout.String(), "shutting down")
}

// TestServeBannerAndLogsHoldNoSecret runs `sluice serve` with clients and
// a pooled upstream, sends requests (one refused for its key), and checks
// the banner names the store without its password, the clients and the
// limits, and that neither stdout nor the log holds a configured secret.
func TestServeBannerAndLogsHoldNoSecret(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("anthropic-ratelimit-requests-limit", "50")
		w.Header().Set("anthropic-ratelimit-requests-remaining", "49")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	secrets := []string{"sk-ant-POOL-SECRET-A", "sk-ant-POOL-SECRET-B", "ck-web-CLIENT-SECRET", "whsec-HOOK-SECRET"}
	require.NoError(t, os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(dir, "sluice.db")+"\n"+
		"clients:\n  - name: web\n    key: "+secrets[2]+"\n"+
		"jobs:\n  webhook_secret: "+secrets[3]+"\n"+
		"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: "+up.URL+"\n"+
		"    api_keys: ["+secrets[0]+", "+secrets[1]+"]\n    limits: {requests_per_minute: 50}\n"), 0o600))

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runMain(ctx, []string{"serve", "--config", cfg, "--log-format", "json", "--log-level", "debug"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	base := "http://" + addr.FindStringSubmatch(stdout.String())[1]
	for _, key := range []string{secrets[2], "wrong-key", secrets[2]} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/anthropic/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.Eventually(t, func() bool { return strings.Count(stderr.String(), `"msg":"request"`) == 3 }, 10*time.Second, 5*time.Millisecond, stderr.String())
	stop()
	require.Equal(t, 0, <-code, stderr.String())

	banner := stdout.String()
	require.Contains(t, banner, "store: sqlite:"+filepath.Join(dir, "sluice.db"))
	require.Contains(t, banner, "clients: 1 (web), a key is required")
	require.Contains(t, banner, "limits rpm 50 (others learned); max_concurrency 64; 2 key(s)")
	require.Contains(t, stderr.String(), `"msg":"sluice started"`)
	require.Contains(t, stderr.String(), `"msg":"limit learned from headers"`)
	for _, s := range secrets {
		require.NotContains(t, banner, s)
		require.NotContains(t, stderr.String(), s)
	}
}

func TestDescribeStoreHidesThePassword(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://sluice:xxxxx@db:5432/sluice?sslmode=disable",
		describeStore("postgres://sluice:hunter2@db:5432/sluice?sslmode=disable", false))
	require.Contains(t, describeStore("sqlite:./sluice.db", true), "(the default; set store: in a config file)")
}
