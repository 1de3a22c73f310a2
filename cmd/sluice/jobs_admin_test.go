package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJobsCLIWithAdminKey: `sluice jobs` sends its --api-key; with an admin
// key it sees every client's jobs and may requeue across clients, with
// another client's key it sees none of them and is refused the sweep.
func TestJobsCLIWithAdminKey(t *testing.T) {
	t.Parallel()
	up := fakeAnthropic(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(dir, "s.db")+"\n"+
		"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: "+up.URL+"\n    api_key: sk-up\n"+
		"clients:\n  - {name: alice, key: ck-alice}\n  - {name: bob, key: ck-bob}\n  - {name: root, key: ck-root, role: admin}\n"), 0o600))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runMain(ctx, []string{"serve", "--config", cfg}, &stdout, &stderr) }()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	base := "http://" + addr.FindStringSubmatch(stdout.String())[1]
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/jobs", strings.NewReader(
		`{"upstream":"anthropic","request":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`))
	require.NoError(t, err)
	req.Header.Set("x-api-key", "ck-alice")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	jobs := func(key string, args ...string) (int, string, string) {
		var out, errOut strings.Builder
		c := runMain(context.Background(), append(append([]string{"jobs"}, args...), "--server", base, "--api-key", key), &out, &errOut)
		return c, out.String(), errOut.String()
	}
	c, out, errOut := jobs("ck-root", "ls")
	require.Equal(t, 0, c, errOut)
	jobLine := regexp.MustCompile(`(?m)^1\s+\w+\s+anthropic`)
	require.Regexp(t, jobLine, out, "the admin sees alice's job")
	c, out, errOut = jobs("ck-bob", "ls")
	require.Equal(t, 0, c, errOut)
	require.NotRegexp(t, jobLine, out, "bob does not")
	c, _, errOut = jobs("ck-bob", "retry", "--all")
	require.Equal(t, 1, c)
	require.Contains(t, errOut, "403")
	c, _, errOut = jobs("ck-root", "retry", "--all")
	require.Equal(t, 0, c, errOut)

	stop()
	require.Equal(t, 0, <-code, stderr.String())
}

// fakeAnthropic is an upstream answering every request with a one-token
// Anthropic message; closed at cleanup.
func fakeAnthropic(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	return up
}
