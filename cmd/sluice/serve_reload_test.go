//go:build unix

package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServeSIGHUPReloads: SIGHUP makes `sluice serve` read its config file
// again (a new client key works, the old one stops) instead of dying; a
// broken file is refused and logged, and the running config stays.
func TestServeSIGHUPReloads(t *testing.T) {
	t.Parallel()
	up := fakeAnthropic(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	write := func(clients string) {
		require.NoError(t, os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: none\n"+
			"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: "+up.URL+"\n    api_key: sk-up\n"+clients), 0o600))
	}
	write("clients:\n  - {name: web, key: ck-one}\n")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runMain(ctx, []string{"serve", "--config", cfg, "--log-format", "text"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	url := "http://" + addr.FindStringSubmatch(stdout.String())[1] + "/anthropic/v1/messages"
	noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(key string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url,
			strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", key)
		resp, err := noKeepAlive.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, 200, send("ck-one"))

	write("clients:\n  - {name: web, key: ck-two}\n")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool { return send("ck-two") == 200 }, 10*time.Second, 10*time.Millisecond, stderr.String())
	require.Equal(t, 401, send("ck-one"))

	write("clients:\n  - {name: web, key: ck-three, role: root}\n")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	// The refusal is logged (on the process's stderr); the keys never
	// change: ck-three is never let in, ck-two keeps working.
	require.Never(t, func() bool { return send("ck-three") == 200 }, 500*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, 200, send("ck-two"), "the running config stays")

	stop()
	require.Equal(t, 0, <-code, stderr.String())
}
