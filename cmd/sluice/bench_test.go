package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/scenario"
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
		{[]string{"bench", "trace", "--trace", "nosuch"}, 2, "", `--trace "nosuch": no such built-in trace (azure-code, azure-conv, mooncake-conv, synthetic-bursty) or file`},
		{[]string{"bench", "trace", "--trace", "azure-code:urgent"}, 2, "", "want NAME_OR_FILE[:class[:token-scale]]"},
		{[]string{"bench", "trace", "--trace", "azure-code:high:0"}, 2, "", "the token scale must be a number in (0, 1000]"},
		{[]string{"bench", "trace", "--trace", ":high"}, 2, "", "name a built-in trace or a file"},
		{[]string{"bench", "trace", "--batch", "x"}, 2, "", `--batch "x": want N[:class]`},
		{[]string{"bench", "trace", "--batch", "10:urgent"}, 2, "", `--batch "10:urgent"`},
		{[]string{"bench", "trace", "--limits", "1,2"}, 2, "", "--limits wants rpm,itpm,otpm"},
		{[]string{"bench", "trace", "--limits", "1,2.5,3"}, 2, "", "--limits wants rpm,itpm,otpm"},
		{[]string{"bench", "trace", "--limits", "0,0,0"}, 2, "", "at least one limit must be positive"},
		{[]string{"bench", "trace", "--limits", "4000,2M,400k", "--preset", "anthropic-tier4"}, 2, "", "give --limits or --preset, not both"},
		{[]string{"bench", "trace", "--preset", "openai-small"}, 2, "", "is an OpenAI table"},
		{[]string{"bench", "trace", "--preset", "nosuch"}, 2, "", `--preset: unknown preset "nosuch"`},
		{[]string{"bench", "trace", "--profile", "fast"}, 2, "", `bench options: Replay.Profile: unknown profile "fast"`},
		{[]string{"bench", "trace", "--otpm-mode", "lazy"}, 2, "", `bench options: OTPMMode must be`},
		{[]string{"bench", "trace", "--output-reservation", "some"}, 2, "", `bench options: OutputReservation must be`},
		{[]string{"bench", "trace", "--speed", "0"}, 2, "", "--speed must be in (0, 1000]"},
		{[]string{"bench", "trace", "--token-scale", "-1"}, 2, "", "--token-scale must be in (0, 1000]"},
		{[]string{"bench", "trace", "--window", "0s"}, 2, "", "--window must be positive"},
		{[]string{"bench", "trace", "--burst-seconds", "0"}, 2, "", "--burst-seconds must be in (0, 3600]"},
		{[]string{"bench", "trace", "--from", "-1s"}, 2, "", "--from must be >= 0"},
		{[]string{"bench", "trace", "--timeout", "0s"}, 2, "", "--timeout must be positive"},
		{[]string{"bench", "trace", "--batch-mean", "0"}, 2, "", "--batch-mean must be in [1, 100000]"},
		{[]string{"bench", "trace", "--quick", "--window", "2s", "--batch", "10:normal", "--trace", "azure-conv::0.5", "--limits", "4000,2M,400k"}, 0,
			"batch: 10 requests in class normal", ""},
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

func TestParseTraceSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want scenario.TraceSpec
	}{
		{"azure-code", scenario.TraceSpec{Source: "azure-code"}},
		{"azure-code:critical", scenario.TraceSpec{Source: "azure-code", Class: "critical"}},
		{"azure-code:1", scenario.TraceSpec{Source: "azure-code", Class: "1"}},
		{"mooncake-conv:high:0.25", scenario.TraceSpec{Source: "mooncake-conv", Class: "high", TokenScale: 0.25}},
		{"mooncake-conv::0.25", scenario.TraceSpec{Source: "mooncake-conv", TokenScale: 0.25}},
		{"./bench_test.go", scenario.TraceSpec{Source: "./bench_test.go"}},
		{"azure-code:high:1", scenario.TraceSpec{Source: "azure-code", Class: "high", TokenScale: 1}},
		{"bench_test.go:low", scenario.TraceSpec{Source: "bench_test.go", Class: "low"}},
	}
	for _, tc := range tests {
		got, err := parseTraceSpec(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}
