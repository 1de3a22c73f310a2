package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientsCLI: `sluice clients` against a running gateway: an admin
// creates a client (its key printed once), the key works on a proxied
// request, ls lists both sources without keys, update changes the budget,
// rotate prints a new key and the old one is refused, revoke refuses the
// new one; a client that is not an admin and bad command lines get one
// line and a non-zero exit.
func TestClientsCLI(t *testing.T) {
	t.Parallel()
	up := fakeAnthropic(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(dir, "s.db")+"\n"+
		"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: "+up.URL+"\n    api_key: sk-up\n"+
		"clients:\n  - {name: bob, key: ck-bob}\n  - {name: root, key: ck-root, role: admin}\n"), 0o600))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runMain(ctx, []string{"serve", "--config", cfg}, &stdout, &stderr) }()
	addr := regexp.MustCompile(`listening on http://(\S+)`)
	require.Eventually(t, func() bool { return addr.MatchString(stdout.String()) }, 10*time.Second, 5*time.Millisecond, stderr.String())
	base := "http://" + addr.FindStringSubmatch(stdout.String())[1]

	clients := func(key string, args ...string) (int, string, string) {
		var out, errOut strings.Builder
		c := runMain(context.Background(), append(append([]string{"clients"}, args...), "--server", base, "--key", key), &out, &errOut)
		return c, out.String(), errOut.String()
	}
	proxied := func(key string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/anthropic/v1/messages", strings.NewReader(
			`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	keyLine := regexp.MustCompile(`(?m)^key: (sk-sluice-\S+)$`)

	c, out, errOut := clients("ck-root", "create", "team-a", "--rpm", "600", "--budget-day", "25")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "created client team-a (role client, 600 rpm, $25/day)")
	require.Regexp(t, keyLine, out)
	key1 := keyLine.FindStringSubmatch(out)[1]
	require.Equal(t, http.StatusOK, proxied(key1))

	c, out, errOut = clients("ck-root", "ls")
	require.Equal(t, 0, c, errOut)
	require.Regexp(t, `(?m)^bob\s+config\s+client\s+no limit\s+-`, out)
	require.Regexp(t, `(?m)^team-a\s+api\s+client\s+600 rpm, \$25/day\s+sk-sluice-`, out)
	require.NotContains(t, out, key1)

	c, out, errOut = clients("ck-root", "update", "team-a", "--budget-day", "40", "--max-priority", "high")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "updated client team-a (role client, 600 rpm, $40/day)", "the limits not named are kept")
	c, out, errOut = clients("ck-root", "get", "team-a")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, `"max_priority": "high"`)
	require.NotContains(t, out, `"key"`)

	// Allowed upstreams and models: a model outside the patterns is
	// refused (403), an empty list allows every one again.
	c, out, errOut = clients("ck-root", "update", "team-a", "--allowed-upstreams", "anthropic", "--allowed-models", "claude-haiku-*, claude-opus-*")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "upstreams anthropic, models claude-haiku-*|claude-opus-*)")
	require.Equal(t, http.StatusForbidden, proxied(key1), "claude-sonnet-4-5 is not one of its models")
	c, out, errOut = clients("ck-root", "update", "team-a", "--allowed-models", "")
	require.Equal(t, 0, c, errOut)
	require.NotContains(t, out, "models")
	require.Equal(t, http.StatusOK, proxied(key1))

	c, out, errOut = clients("ck-root", "rotate", "team-a")
	require.Equal(t, 0, c, errOut)
	key2 := keyLine.FindStringSubmatch(out)[1]
	require.NotEqual(t, key1, key2)
	require.Equal(t, http.StatusUnauthorized, proxied(key1))
	require.Equal(t, http.StatusOK, proxied(key2))

	c, out, errOut = clients("ck-root", "revoke", "team-a")
	require.Equal(t, 0, c, errOut)
	require.Contains(t, out, "revoked client team-a")
	require.Equal(t, http.StatusUnauthorized, proxied(key2))

	for _, tc := range []struct {
		key  string
		args []string
		code int
		msg  string
	}{
		{"ck-bob", []string{"ls"}, 1, "403"},
		{"ck-root", []string{"update", "bob", "--rpm", "1"}, 1, "409"},
		{"ck-root", []string{"create", "x", "--role", "root"}, 1, "role:"},
		{"ck-root", []string{"get", "nobody"}, 1, "404"},
		{"ck-root", []string{"create"}, 2, "create takes one client name"},
		{"ck-root", []string{"frobnicate"}, 2, "unknown clients subcommand"},
		{"ck-root", []string{"revoke", "x", "--rpm", "3"}, 2, "only create and update"},
		{"ck-root", []string{"update", "x"}, 2, "at least one setting"},
		{"ck-root", []string{"create", "x", "--expires", "soon"}, 2, "--expires"},
		{"ck-root", []string{"create", "x", "--allowed-upstreams", "openai"}, 1, `allowed_upstreams[0]: no upstream is named "openai"`},
	} {
		c, _, errOut := clients(tc.key, tc.args...)
		require.Equal(t, tc.code, c, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.msg, "%v", tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
	stop()
	require.Equal(t, 0, <-code)
}
