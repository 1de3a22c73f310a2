package jobs

import (
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

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/mock"
)

// crashLease is the gateways' lease: a killed gateway's jobs are retried
// this long after the kill (the minimum lease_for is 1s).
const crashLease = 2 * time.Second

var testHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

func httpDo(t *testing.T, method, u, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := testHTTP.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// startMockProcess runs `sluice mock` on a free loopback port with the
// given extra flags and returns its base URL.
func startMockProcess(t *testing.T, flags ...string) string {
	t.Helper()
	p := startProcess(t, "sluice mock", "sluice mock listening on ", append([]string{"mock", "--listen", "127.0.0.1:0", "--seed", "1"}, flags...)...)
	return p.addr
}

// mockCalls is every answer the mock gave (or connection it reset), read
// from GET /mock/stats.
func mockCalls(t *testing.T, mockURL string) int64 {
	t.Helper()
	code, body := httpDo(t, "GET", mockURL+"/mock/stats", "")
	require.Equal(t, 200, code, string(body))
	var s mock.Stats
	require.NoError(t, json.Unmarshal(body, &s), string(body))
	var n int64
	for _, c := range s.Overall.ByStatus {
		n += c
	}
	return n
}

// mockSucceeded is the mock's count of 200 answers.
func mockSucceeded(t *testing.T, mockURL string) int64 {
	t.Helper()
	code, body := httpDo(t, "GET", mockURL+"/mock/stats", "")
	require.Equal(t, 200, code, string(body))
	var s mock.Stats
	require.NoError(t, json.Unmarshal(body, &s), string(body))
	return s.Overall.ByStatus["200"]
}

// gatewayConfig writes a `sluice serve` config for one upstream "mock" on
// store and returns its path.
func gatewayConfig(t *testing.T, store, mockURL string) string {
	t.Helper()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
shutdown_grace: 5s
upstreams:
  - name: mock
    protocol: anthropic
    base_url: %q
    api_key: test-key
    limits: {max_concurrency: 64}
    min_concurrency: 64
jobs:
  lease_for: %s
  max_in_flight: 64
`, store, mockURL, crashLease)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// startGateway runs `sluice serve --config path` and returns it; its addr
// is the gateway's base URL.
func startGateway(t *testing.T, config string) *process {
	t.Helper()
	return startProcess(t, "sluice serve", "sluice listening on ", "serve", "--config", config)
}

func batchFile(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%05d","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"job %d"}]}}`+"\n", i, i)
	}
	return b.String()
}

// waitBatchEnded polls a batch until it ended.
func waitBatchEnded(t *testing.T, base, id string, limit time.Duration) jobsapi.BatchView {
	t.Helper()
	var v jobsapi.BatchView
	require.Eventually(t, func() bool {
		code, body := httpDo(t, "GET", base+"/v1/batches/"+id, "")
		require.Equal(t, 200, code, string(body))
		v = decode[jobsapi.BatchView](t, body)
		return v.ProcessingStatus == "ended"
	}, limit, 50*time.Millisecond, "batch %s never ended: %+v", id, v)
	return v
}

// eachJob calls fn with every job of the store.
func eachJob(t *testing.T, st jobstore.Store, fn func(*jobstore.Job)) {
	t.Helper()
	var after int64
	for {
		page, err := st.List(context.Background(), jobstore.ListParams{After: after, Limit: jobstore.ListLimitMax})
		require.NoError(t, err)
		for i := range page.Jobs {
			fn(page.Jobs[i])
		}
		if page.Next == 0 {
			return
		}
		after = page.Next
	}
}

// countStates opens the store at dsn and counts its jobs by state.
func countStates(t *testing.T, dsn string) map[jobstore.State]int {
	t.Helper()
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	out := map[jobstore.State]int{}
	eachJob(t, st, func(j *jobstore.Job) { out[j.State]++ })
	return out
}

// TestCrashKillMidFlightLosesNothing SIGKILLs `sluice serve` while 1,000
// jobs are in flight against `sluice mock`, restarts it on the same SQLite
// file and counts: every job succeeds exactly once, none is lost, and the
// mock saw at most one extra call per job that was running at the kill.
func TestCrashKillMidFlightLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	t.Parallel()
	const jobs = 1000
	mockURL := startMockProcess(t, "--ttft", "150ms", "--per-token", "0s")
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "crash.db")
	config := gatewayConfig(t, dsn, mockURL)
	g := startGateway(t, config)
	start := time.Now()
	code, body := httpDo(t, "POST", g.addr+"/v1/batches?upstream=mock", batchFile(jobs))
	require.Equal(t, 200, code, string(body))
	batch := decode[jobsapi.BatchView](t, body)

	// Kill once a good part of the work is done and much is in flight.
	require.Eventually(t, func() bool { return mockSucceeded(t, mockURL) >= jobs/4 }, 20*time.Second, 5*time.Millisecond)
	g.kill(t)
	callsAtKill := mockCalls(t, mockURL)

	atKill := countStates(t, dsn)
	require.Equal(t, jobs, atKill[jobstore.StateQueued]+atKill[jobstore.StateRunning]+atKill[jobstore.StateSucceeded], "no job lost at the kill: %v", atKill)
	require.Positive(t, atKill[jobstore.StateRunning], "the kill must catch jobs in flight")

	g2 := startGateway(t, config)
	v := waitBatchEnded(t, g2.addr, batch.ID, 30*time.Second)
	elapsed := time.Since(start)
	g2.term(t)

	final := countStates(t, dsn)
	require.Equal(t, map[jobstore.State]int{jobstore.StateSucceeded: jobs}, final, "every job ends succeeded, exactly once")
	require.Equal(t, jobs, v.Counts.Succeeded)

	calls := mockCalls(t, mockURL)
	extra := calls - jobs
	t.Logf("crash figures: jobs=%d running at kill=%d queued at kill=%d succeeded at kill=%d; mock calls at kill=%d, total=%d, extra=%d; all ended %v after submit",
		jobs, atKill[jobstore.StateRunning], atKill[jobstore.StateQueued], atKill[jobstore.StateSucceeded], callsAtKill, calls, extra, elapsed.Round(time.Millisecond))
	require.GreaterOrEqual(t, extra, int64(0))
	require.LessOrEqual(t, extra, int64(atKill[jobstore.StateRunning]), "at most one extra call per job in flight at the kill")
}

// TestTwoGatewaysOnPostgresRunEachJobOnce runs two `sluice serve` processes
// on one PostgreSQL schema: they drain 5,000 jobs with no job run twice
// (the mock counts exactly 5,000 calls) and none left behind.
func TestTwoGatewaysOnPostgresRunEachJobOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	t.Parallel()
	const jobs = 5000
	dsn := jobstoretest.PostgresDSN(t)
	mockURL := startMockProcess(t, "--ttft", "2ms", "--per-token", "0s")
	// Migrate once before two processes race to.
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{MaxConns: 4})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	config := gatewayConfig(t, dsn, mockURL)
	g1 := startGateway(t, config)
	g2 := startGateway(t, config)
	start := time.Now()
	// The PostgreSQL store connects in the background: the jobs API answers
	// 503 with Retry-After until it has.
	var code int
	var body []byte
	require.Eventually(t, func() bool {
		code, body = httpDo(t, "POST", g1.addr+"/v1/batches?upstream=mock", batchFile(jobs))
		return code != 503
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 200, code, string(body))
	batch := decode[jobsapi.BatchView](t, body)
	v := waitBatchEnded(t, g2.addr, batch.ID, 30*time.Second)
	elapsed := time.Since(start)
	g1.term(t)
	g2.term(t)

	require.Equal(t, jobs, v.Counts.Succeeded, "%+v", v.Counts)
	owners := map[string]int{}
	total := 0
	eachJob(t, st, func(j *jobstore.Job) {
		total++
		require.Equal(t, jobstore.StateSucceeded, j.State, "job %d", j.ID)
		require.Zero(t, j.Stalls, "job %d was rescued", j.ID)
		owners[j.Lease.Owner]++
	})
	require.Equal(t, jobs, total, "every job is in the store")
	calls := mockCalls(t, mockURL)
	t.Logf("two gateways on PostgreSQL: %d jobs in %v (%.0f jobs/s), mock calls=%d, per owner=%v", jobs, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(), calls, owners)
	require.Equal(t, int64(jobs), calls, "no job ran twice")
	require.Len(t, owners, 2, "both gateways ran jobs")
}
