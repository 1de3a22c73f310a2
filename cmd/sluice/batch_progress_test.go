package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestBatchRateAfterResume: results a rerun finds already finished on
// the gateway are not in the rate, so the ETA is that of the work left.
func TestBatchRateAfterResume(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Unix(1_700_000_000, 0))
	r := &batchRun{file: &jobsapi.BatchFile{Lines: make([]jobsapi.BatchLine, 100)}, clk: fc, start: fc.Now(), already: 50}
	r.done, r.collected = 10, 10 // collected at once: no rate yet
	fc.Advance(time.Second)
	_, _, ok := r.rateAndETA(fc.Now())
	require.False(t, ok, "results collected at once give no rate")
	r.done = 20 // 10 waited for, in 10 s
	fc.Advance(9 * time.Second)
	rate, eta, ok := r.rateAndETA(fc.Now())
	require.True(t, ok)
	require.InDelta(t, 1.0, rate, 1e-9)
	require.Equal(t, 30*time.Second, eta, "30 lines left at 1/s")
}

// TestBatchProgressOffATerminal: a log gets plain lines (no carriage
// return, no escape), and the run ends with a summary.
func TestBatchProgressOffATerminal(t *testing.T) {
	t.Parallel()
	srv := jobsGatewayWith(t, &countingUpstream{calls: map[string]int{}}, true, func(c *jobs.Config) { c.Admission = flatSpender(0.0125) })
	in, out := batchInput(t, 6)
	var stdout, stderr bytes.Buffer
	code := runMain(boundedContext(t), []string{"batch", "run", in, "--server", srv.URL, "-o", out}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	log := stderr.String()
	require.NotContains(t, log, "\r")
	require.NotContains(t, log, "\x1b[")
	require.Contains(t, log, "batch: 6/6 done (0 errored, 0 from an earlier run)")
	require.Contains(t, log, "batch summary: 6 succeeded, 0 errored, 0 canceled; tokens in 0 out 0; cost $0.0750;",
		"the cost is the results' X-Sluice-Cost-Usd summed")
}

// TestBatchInterrupt: Ctrl-C with jobs still queued on the gateway either
// cancels them (--cancel-on-interrupt) or says plainly that they keep
// running, with their ids.
func TestBatchInterrupt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		flag   bool
		stdin  io.Reader
		cancel bool
	}{
		{name: "--cancel-on-interrupt", flag: true, stdin: strings.NewReader(""), cancel: true},
		{name: "off a terminal", stdin: strings.NewReader("y\n")},
		{name: "asked on a terminal, yes", stdin: terminalReader{strings.NewReader("y\n")}, cancel: true},
		{name: "asked on a terminal, no", stdin: terminalReader{strings.NewReader("\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := jobsGateway(t, &countingUpstream{calls: map[string]int{}}, false) // not started: jobs stay queued
			in, out := batchInput(t, 10)
			ctx, interrupt := context.WithCancel(context.WithValue(boundedContext(t), stdinKey{}, tc.stdin))
			go func() { // Ctrl-C once the run has 3 jobs queued
				for ctx.Err() == nil && len(listJobs(t, srv.URL, "queued")) < 3 {
					time.Sleep(5 * time.Millisecond)
				}
				interrupt()
			}()
			args := []string{"batch", "run", in, "-o", out, "--concurrency", "3", "--server", srv.URL}
			if tc.flag {
				args = append(args, "--cancel-on-interrupt")
			}
			var stdout, stderr bytes.Buffer
			require.Equal(t, 1, runMain(ctx, args, &stdout, &stderr), stderr.String())
			_, asked := tc.stdin.(terminalReader)
			require.Equal(t, asked, strings.Contains(stderr.String(), "job(s) this run left queued or running on the gateway? [y/N]"), stderr.String())
			if tc.cancel {
				// A submit cut by Ctrl-C is found again by its idempotency key.
				require.Contains(t, stderr.String(), "batch: canceled 3 job(s) still queued or running on the gateway")
				require.Len(t, listJobs(t, srv.URL, "canceled"), 3)
				require.Empty(t, listJobs(t, srv.URL, "queued"))
			} else {
				require.Regexp(t, `batch: \d submitted job\(s\).* keep running on the gateway and will be paid for`, stderr.String())
				require.Len(t, listJobs(t, srv.URL, "queued"), 3)
			}
			require.Contains(t, stderr.String(), "batch summary: 0 succeeded")
			require.Contains(t, stderr.String(), "run the same command again")
		})
	}
}

func batchInput(t *testing.T, n int) (in, out string) {
	t.Helper()
	dir := t.TempDir()
	in, out = filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"r%02d","params":{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o644))
	return in, out
}

func listJobs(t *testing.T, base, state string) []jobsapi.JobView {
	t.Helper()
	resp, err := http.Get(base + "/v1/jobs?state=" + state) //nolint:noctx // test helper
	require.NoError(t, err)
	defer resp.Body.Close()
	var page jobsapi.ListResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	return page.Data
}

// flatSpender admits every job call on its own upstream and charges it
// the same cost.
type flatSpender float64

func (f flatSpender) RouteJobs(upstream string, _ llm.Priority, _ string, _ provider.Cost) (admit.JobRoute, bool) {
	return admit.JobRoute{Target: admit.Target{Upstream: upstream}}, true
}

func (f flatSpender) Reroute(admit.Target, llm.Priority, string, provider.Cost, time.Time, error) (admit.Target, bool) {
	return admit.Target{}, false
}

func (f flatSpender) AdmitNow(admit.Target, *dispatch.Request) (admit.Settler, error) { return f, nil }

func (f flatSpender) Settle(_ dispatch.End, ended bool) float64 {
	if !ended {
		return 0
	}
	return float64(f)
}
