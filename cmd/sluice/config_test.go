package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigCheck: `sluice config check` and `sluice serve --check` print a
// bad file's mistake as one line naming the file, line and field with the
// fix, and exit 1; a good file exits 0.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	const up = "store: none\nupstreams:\n  - name: anthropic\n    protocol: anthropic\n    api_key: k\n"
	good := write("good.yaml", up)
	for _, tc := range []struct{ name, text, want string }{
		{"typo.yaml", up + "    limits:\n      request_per_minute: 50\n", ":7: upstreams[0].limits.request_per_minute: unknown field; did you mean requests_per_minute?"},
		{"fifty.yaml", up + "    limits: {requests_per_minute: fifty}\n", `:6: upstreams[0].limits.requests_per_minute: want a whole number, got "fifty"`},
		{"dur.yaml", up + "    request_timeout: 10\n", ":6: upstreams[0].request_timeout: got 10: durations need a unit: 10s"},
		{"url.yaml", up + "    base_url: 127.0.0.1:23019\n", ":6: upstreams[0].base_url: a URL needs its scheme: http://127.0.0.1:23019"},
		{"indent.yaml", up + "   limits: {}\n", ":6: YAML syntax: this line is indented 3 spaces"},
	} {
		bad := write(tc.name, tc.text)
		for _, args := range [][]string{{"config", "check", "--config", bad}, {"config", "validate", "--config", bad}, {"serve", "--check", "--config", bad}} {
			var out, errb bytes.Buffer
			code := runMain(context.Background(), args, &out, &errb)
			require.Equal(t, 1, code, "%v: %s", args, errb.String())
			line := strings.TrimSuffix(errb.String(), "\n")
			require.NotContains(t, line, "\n", args)
			require.Contains(t, line, bad+tc.want, args)
		}
	}
	var out, errb bytes.Buffer
	require.Equal(t, 0, runMain(context.Background(), []string{"config", "check", "--config", good}, &out, &errb), errb.String())
	require.Contains(t, out.String(), good+": ok: ")
	require.Equal(t, 2, runMain(context.Background(), []string{"config", "lint", "--config", good}, &out, &errb))
	require.Equal(t, 2, runMain(context.Background(), []string{"config"}, &out, &errb))
}
