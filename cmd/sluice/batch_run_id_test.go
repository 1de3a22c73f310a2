package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
)

// TestBatchRunJobsCarryTheirRun: `sluice batch run` names its run
// (run_ and the input's hash, the same when the run is resumed) and gives
// every job the run id and its line's custom_id, which `sluice jobs ls`
// (filtered with --run) and `jobs get` show; `sluice batch status RUN`
// counts the run's jobs per state and `sluice batch cancel RUN` cancels
// every one not yet finished, whoever's line it was.
func TestBatchRunJobsCarryTheirRun(t *testing.T) {
	t.Parallel()
	srv := jobsGateway(t, &countingUpstream{calls: map[string]int{}}, true)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "out.jsonl")
	var b strings.Builder
	const n = 5
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"q-%d","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	require.NoError(t, os.WriteFile(in, []byte(b.String()), 0o644))
	cli := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runMain(boundedContext(t), append(args, "--server", srv.URL), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, _, errOut := cli("batch", "run", in, "-o", out)
	require.Equal(t, 0, code, errOut)
	m := regexp.MustCompile(`batch: run (run_[0-9a-f]{16}), 5 line\(s\)`).FindStringSubmatch(errOut)
	require.NotNil(t, m, "the run names itself: %s", errOut)
	run := m[1]
	code, _, errOut = cli("batch", "run", in, "-o", filepath.Join(dir, "again.jsonl"))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "batch: run "+run+",", "the same input is the same run")

	code, listed, errOut := cli("jobs", "ls", "--run", run, "--oldest-first")
	require.Equal(t, 0, code, errOut)
	rows := strings.Split(strings.TrimSpace(listed), "\n")
	require.Len(t, rows, n+1, listed)
	require.Equal(t, []string{"ID", "STATE", "UPSTREAM", "PRIORITY", "ATTEMPTS", "RUN", "CUSTOM_ID", "CREATED"}, strings.Fields(rows[0]))
	var customs, want []string
	for i, row := range rows[1:] {
		f := strings.Fields(row)
		require.Equal(t, []string{"succeeded", run}, []string{f[1], f[5]}, row)
		customs = append(customs, f[6])
		want = append(want, fmt.Sprintf("q-%d", i))
	}
	require.ElementsMatch(t, want, customs, "each job carries its line's custom_id (submitted concurrently: in any order)")
	code, listed, _ = cli("jobs", "ls", "--run", "run_0000000000000000")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(listed), "\n"), 1, "another run has none: %s", listed)
	first := strings.Fields(rows[1])
	code, got, errOut := cli("jobs", "get", first[0])
	require.Equal(t, 0, code, errOut)
	require.Contains(t, got, `"run_id": "`+run+`"`)
	require.Contains(t, got, `"custom_id": "`+first[6]+`"`)

	code, status, errOut := cli("batch", "status", run)
	require.Equal(t, 0, code, errOut)
	var st runStatusView
	require.NoError(t, json.Unmarshal([]byte(status), &st), status)
	require.Equal(t, runStatusView{RunID: run, Total: n, Counts: jobsapi.StateCounts{Succeeded: n}}, st)
	code, canceled, errOut := cli("batch", "cancel", run)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, canceled, `"canceled": 0`, "every job of it had finished")

	// A run whose jobs wait: canceled as a whole.
	idle := jobsGateway(t, &countingUpstream{calls: map[string]int{}}, false)
	for i := range 3 {
		req, err := http.NewRequestWithContext(boundedContext(t), "POST", idle.URL+"/v1/jobs", strings.NewReader(fmt.Sprintf(
			`{"upstream":"anthropic","run_id":"run_waiting","custom_id":"w-%d","request":{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}}`, i)))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	idleCLI := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runMain(boundedContext(t), append(args, "--server", idle.URL), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, status, errOut = idleCLI("batch", "status", "run_waiting")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, status, `"queued": 3`)
	code, canceled, errOut = idleCLI("batch", "cancel", "run_waiting")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, canceled, `"canceled": 3`)
	code, status, errOut = idleCLI("batch", "status", "run_waiting")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, status, `"canceled": 3`)
	code, _, errOut = idleCLI("batch", "cancel", "run_missing")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no run "run_missing"`)
	code, _, errOut = idleCLI("batch", "status", "run_missing")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no run "run_missing"`)
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
}
