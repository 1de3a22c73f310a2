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
