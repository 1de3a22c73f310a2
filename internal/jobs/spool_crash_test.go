package jobs

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

// TestCrashWhileStoreAwayPaysOnce runs `sluice serve` on PostgreSQL
// reached through a TCP proxy, in front of `sluice mock`: jobs are in
// flight when the proxy is cut (all but the first), their answers arrive
// while the store is away, and the gateway is SIGKILLed once every answer met the outage
// (well within the jobs' leases). Restarted with the store back, the
// gateway writes the answers back from its spool: every job succeeds with
// the answer it was given and the mock saw exactly one call per job.
func TestCrashWhileStoreAwayPaysOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	t.Parallel()
	const jobs = 16
	dsn := jobstoretest.PostgresDSN(t)
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{MaxConns: 2}) // migrates
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := jobstoretest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()

	mockURL := startMockProcess(t, "--ttft", "1500ms", "--per-token", "0s")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
shutdown_grace: 5s
cluster: {store: "off"}
upstreams:
  - name: mock
    protocol: anthropic
    base_url: %q
    api_key: test-key
    limits: {max_concurrency: 64}
    min_concurrency: 64
jobs:
  lease_for: 20s
  max_in_flight: 64
  spool_dir: %q
`, u.String(), mockURL, filepath.Join(t.TempDir(), "spool"))
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(config, []byte(cfg), 0o600))

	// An answer that meets the outage is either retried while its lease
	// holds or, when the lease can no longer be trusted (a loaded machine
	// can make the answer late), kept in the spool at once.
	metOutage := []string{"recording job result; retrying while the lease holds", "kept a job result in the spool until the store answers"}
	g := startProcessMarking(t, "sluice serve", "sluice listening on ", metOutage, "serve", "--config", config)
	// The PostgreSQL store connects in the background: the jobs API answers
	// 503 with Retry-After until it has.
	var code int
	var body []byte
	require.Eventually(t, func() bool {
		code, body = httpDo(t, "POST", g.addr+"/v1/batches?upstream=mock", batchFile(jobs))
		return code != 503
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 200, code, string(body))
	// The first job goes alone (the gateway learns the provider's limits
	// from its answer), then the others at once: cut when they are in
	// flight.
	var running int
	require.Eventually(t, func() bool {
		states := statesIn(t, st)
		running = states[jobstore.StateRunning]
		return states[jobstore.StateQueued] == 0 && running > 0 && running+states[jobstore.StateSucceeded] == jobs
	}, 20*time.Second, 10*time.Millisecond, "every job in flight or done")
	proxy.Cut()
	require.GreaterOrEqual(t, running, jobs/2)
	require.Eventually(t, func() bool { return g.logs.jobsMarked() >= running }, 20*time.Second, 20*time.Millisecond,
		"every answer met the outage")
	g.kill(t)
	proxy.Restore()
	atKill := mockCalls(t, mockURL)

	g2 := startGateway(t, config)
	require.Eventually(t, func() bool { return statesIn(t, st)[jobstore.StateSucceeded] == jobs }, 60*time.Second, 50*time.Millisecond,
		"every job succeeds once the store is back")
	g2.term(t)
	eachJob(t, st, func(j *jobstore.Job) {
		require.Equal(t, jobstore.StateSucceeded, j.State, "job %d", j.ID)
		require.Equal(t, 1, j.Attempts, "job %d was called once", j.ID)
		require.Contains(t, string(j.Result.Body), `"type":"message"`, "job %d keeps the answer", j.ID)
	})
	calls := mockCalls(t, mockURL)
	t.Logf("crash while the store was away: %d jobs, %d answered during the outage, mock calls at the kill %d, in all %d (paid twice: %d)",
		jobs, running, atKill, calls, calls-int64(jobs))
	require.Equal(t, int64(jobs), calls, "no job paid twice")
}

// statesIn counts st's jobs by state.
func statesIn(t *testing.T, st jobstore.Store) map[jobstore.State]int {
	t.Helper()
	out := map[jobstore.State]int{}
	eachJob(t, st, func(j *jobstore.Job) { out[j.State]++ })
	return out
}
