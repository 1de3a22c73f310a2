package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBenchAndDemoCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"bench", "nosuch"}, 2, "", `unknown scenario "nosuch"`},
		{[]string{"bench"}, 2, "", "name a scenario"},
		{[]string{"bench", "mock", "extra"}, 2, "", "one scenario expected"},
		{[]string{"bench", "--duration", "-1s", "priority"}, 2, "", "--duration must be positive"},
		{[]string{"bench", "--nosuchflag", "mock"}, 2, "", "flag provided but not defined"},
		{[]string{"demo", "extra"}, 2, "", "unexpected argument"},
		{[]string{"demo", "--requests", "0"}, 2, "", "--requests must be >= 1"},
		{[]string{"bench", "--rates", "0,x", "overhead"}, 2, "", "--rates wants positive integers"},
		{[]string{"bench", "--rounds", "-1", "overhead"}, 2, "", "--rounds and --round must be >= 0"},
		{[]string{"bench", "overhead", "--rates", "100", "--rounds", "1", "--round", "200ms"}, 0, "bare proxy", ""},
		{[]string{"bench", "--quick", "--json", "mock"}, 0, `"requests_per_s"`, ""},
		{[]string{"bench", "mock", "--quick"}, 0, "1 of 1 scenarios met every target", ""},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			code := runMain(context.Background(), tc.args, &out, &errOut)
			require.Equal(t, tc.code, code, "stderr: %s", errOut.String())
			require.Contains(t, out.String(), tc.out)
			if tc.code != 0 {
				// The error is one line; only flag's own usage text may
				// precede it.
				lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
				if !strings.Contains(tc.err, "flag provided") {
					require.Len(t, lines, 1, errOut.String())
				}
				last := lines[len(lines)-1]
				require.Contains(t, last, tc.err)
				require.True(t, strings.HasPrefix(last, "sluice "+tc.args[0]+": "), last)
			}
		})
	}
}
