package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/mock"
)

// mockStats reads the mock's statistics.
func mockStats(t *testing.T, mockURL string) mock.Stats {
	t.Helper()
	code, body := httpDo(t, "GET", mockURL+"/mock/stats", "")
	require.Equal(t, 200, code, string(body))
	var s mock.Stats
	require.NoError(t, json.Unmarshal(body, &s), string(body))
	return s
}

// TestCrashKillWhileProviderBatchRuns SIGKILLs `sluice serve` while the
// provider batches of its routed jobs run at `sluice mock` (issue 26),
// restarts it on the same SQLite file and counts: every job succeeds
// once, the mock created each batch once (the restart polls the batches
// the store recorded instead of sending them again), and the spend the
// store holds is what the mock billed, once.
func TestCrashKillWhileProviderBatchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	t.Parallel()
	const jobs, group = 300, 100
	dir := t.TempDir()
	mockCfg := filepath.Join(dir, "mock.yaml")
	require.NoError(t, os.WriteFile(mockCfg, []byte(`listen: 127.0.0.1:0
seed: 1
batch:
  processing: 15s
  prices:
    claude-sonnet-4-5: {input: 3, output: 15}
`), 0o600))
	mockURL := startProcess(t, "sluice mock", "sluice mock listening on ", "mock", "--config", mockCfg).addr
	dsn := "sqlite:" + filepath.Join(dir, "crash.db")
	config := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: %q
shutdown_grace: 5s
upstreams:
  - name: mock
    protocol: anthropic
    base_url: %q
    api_key: test-key
    batch: {route: provider, classes: [low], min_group: %d, max_requests: %d, poll_interval: 300ms}
jobs:
  lease_for: %s
`, dsn, mockURL, group, group, crashLease), 0o600))

	g := startGateway(t, config)
	deadline := time.Now().Add(12 * time.Hour).UTC().Format(time.RFC3339)
	for i := range jobs {
		code, body := httpDo(t, "POST", g.addr+"/v1/jobs", fmt.Sprintf(`{"upstream":"mock","priority":"low","deadline":%q,
			"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"job %d"}]}}`, deadline, i))
		require.Equal(t, 202, code, string(body))
	}
	// Kill once every group is a batch at the provider, before any ended.
	require.Eventually(t, func() bool { return mockStats(t, mockURL).Overall.Batch.Batches == jobs/group }, 20*time.Second, 20*time.Millisecond)
	g.kill(t)
	atKill := mockStats(t, mockURL).Overall.Batch
	require.Less(t, atKill.Lines["succeeded"], int64(jobs), "the kill must come while the batches run")
	require.Equal(t, map[jobstore.State]int{jobstore.StateRunning: jobs}, countStates(t, dsn), "every job is in a provider batch")

	g2 := startGateway(t, config)
	require.Eventually(t, func() bool {
		return countStates(t, dsn)[jobstore.StateSucceeded] == jobs
	}, 60*time.Second, 100*time.Millisecond)
	g2.term(t)

	stats := mockStats(t, mockURL).Overall
	require.Equal(t, int64(jobs/group), stats.Batch.Batches, "no batch sent again after the restart")
	require.Equal(t, int64(jobs), stats.Batch.Lines["succeeded"])
	require.Zero(t, stats.Admitted.Requests, "no job went the synchronous way")

	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	eachJob(t, st, func(j *jobstore.Job) {
		require.Equal(t, 1, j.Attempts, "job %d", j.ID)
		require.Equal(t, "provider", j.Result.Header.Get(BatchHeader))
	})
	rows, err := st.Spend(context.Background(), jobstore.SpendParams{})
	require.NoError(t, err)
	var nanos, requests int64
	for _, r := range rows {
		nanos += r.Nanos
		requests += r.Requests
	}
	require.Equal(t, int64(jobs), requests, "each line charged once")
	require.Equal(t, stats.Batch.CostNanos, nanos, "the spend is what the provider billed, once")
	t.Logf("batch crash figures: jobs=%d batches=%d billed=$%.6f recorded=$%.6f", jobs, stats.Batch.Batches,
		float64(stats.Batch.CostNanos)/1e9, float64(nanos)/1e9)
}
