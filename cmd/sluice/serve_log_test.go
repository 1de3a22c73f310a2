package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestServeLogFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, format, level string
		terminal            bool
		wantJSON            bool
		debugShown          bool
	}{
		{name: "default on a terminal is text", level: "info", terminal: true},
		{name: "default otherwise is json", level: "info", wantJSON: true},
		{name: "json asked on a terminal", format: "json", level: "info", terminal: true, wantJSON: true},
		{name: "text asked off a terminal", format: "text", level: "debug", debugShown: true},
		{name: "level is case-insensitive", format: "json", level: "DEBUG", wantJSON: true, debugShown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := newLogger(&buf, tc.format, tc.level, tc.terminal)
			require.NoError(t, err)
			log.Debug("hidden unless debug")
			log.Info("request", "request_id", "req_1", "status", 200)
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if tc.debugShown {
				require.Len(t, lines, 2, buf.String())
			} else {
				require.Len(t, lines, 1, buf.String())
			}
			last := lines[len(lines)-1]
			var rec map[string]any
			if tc.wantJSON {
				require.NoError(t, json.Unmarshal([]byte(last), &rec), last)
				require.Equal(t, "request", rec["msg"])
				require.Equal(t, "req_1", rec["request_id"])
			} else {
				require.Error(t, json.Unmarshal([]byte(last), &rec), last)
				require.Contains(t, last, "msg=request request_id=req_1 status=200")
			}
		})
	}
}

func TestServeBadLogFlagIsAOneLineUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--log-format", "xml"},
		{"serve", "--log-level", "verbose"},
		{"serve", "--log-level", "warning"},
	} {
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", args, stderr.String())
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%v: %q", args, stderr.String())
		require.Contains(t, stderr.String(), args[1], args)
	}
}

// TestServeWarnsOfExpectedNodesOne: with a cluster store configured and
// cluster.expected_nodes left at 1, `sluice serve` says at start that a
// node starting before the store answers takes the whole quota; with it
// set, or without a cluster store, it says nothing of it. The store here
// never answers (nothing listens): serve starts anyway.
func TestServeWarnsOfExpectedNodesOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		warns      bool
	}{
		{"cluster store, expected_nodes unset", "store: none\ncluster:\n  store: postgres://sluice@127.0.0.1:1/sluice?sslmode=disable\n", true},
		{"cluster store, expected_nodes 1", "store: none\ncluster:\n  store: redis://127.0.0.1:1/0\n  expected_nodes: 1\n", true},
		{"cluster store, expected_nodes 3", "store: none\ncluster:\n  store: redis://127.0.0.1:1/0\n  expected_nodes: 3\n", false},
		{"no cluster store", "store: none\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "sluice.yaml")
			require.NoError(t, os.WriteFile(path, []byte("listen: 127.0.0.1:0\n"+tc.yaml+
				"upstreams:\n  - name: anthropic\n    protocol: anthropic\n    base_url: http://127.0.0.1:1\n    api_key: sk-test\n"), 0o600))
			ctx, stop := context.WithCancel(context.Background())
			var stdout, stderr syncBuffer
			code := make(chan int, 1)
			go func() {
				code <- runMain(ctx, []string{"serve", "--config", path, "--log-format", "json"}, &stdout, &stderr)
			}()
			require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "listening on http://") }, 10*time.Second,
				2*time.Millisecond, stderr.String())
			stop()
			require.Equal(t, 0, <-code, stderr.String())
			warned := false
			for line := range strings.SplitSeq(strings.TrimSpace(stderr.String()), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(fmt.Sprint(rec["msg"]), "cluster.expected_nodes is 1") {
					require.Equal(t, "WARN", rec["level"], line)
					warned = true
				}
			}
			require.Equal(t, tc.warns, warned, stderr.String())
		})
	}
}
