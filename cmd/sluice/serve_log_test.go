package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

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
