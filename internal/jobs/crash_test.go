package jobs

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/queue"
)

// The crash tests run the gateway (store + dispatcher + job runtime + HTTP)
// in a child process, the test binary itself re-executed with gatewayEnv
// set, so it can be SIGKILLed mid-flight; the mock provider runs in the
// test process and counts every call it receives.
const (
	gatewayEnv         = "SLUICE_JOBS_TEST_GATEWAY"
	gatewayStoreEnv    = "SLUICE_JOBS_TEST_STORE"
	gatewayUpstreamEnv = "SLUICE_JOBS_TEST_UPSTREAM"
	gatewayLease       = 2 * time.Second
)

// runTestGateway is the child process: it serves the job API on a free
// loopback port, prints "listening ADDR" and runs until SIGTERM (or dies
// by SIGKILL).
func runTestGateway() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "gateway:", err); return 1 }
	st, err := queue.Open(ctx, os.Getenv(gatewayStoreEnv), queue.Options{MaxConns: 8})
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	d, err := dispatch.New(dispatch.Config{Name: "mock", Protocol: provider.Anthropic, BaseURL: os.Getenv(gatewayUpstreamEnv), APIKey: "test-key",
		Limits: dispatch.Limits{MaxConcurrency: 64}, MinConcurrency: 64})
	if err != nil {
		return fail(err)
	}
	if err := d.Start(ctx); err != nil {
		return fail(err)
	}
	s, err := New(Config{Store: st, Dispatchers: map[string]Dispatcher{"mock": d}, Protocols: map[string]provider.Protocol{"mock": provider.Anthropic},
		LeaseFor: gatewayLease, HeartbeatEvery: gatewayLease / 4, RescueInterval: gatewayLease / 4, PollInterval: 100 * time.Millisecond})
	if err != nil {
		return fail(err)
	}
	if err := s.Start(ctx); err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	<-ctx.Done()
	_ = srv.Shutdown(context.Background())
	_ = s.Stop(context.Background())
	_ = d.Stop(context.Background())
	return 0
}

// gateway is a running child gateway.
type gateway struct {
	cmd  *exec.Cmd
	base string
}

func startGateway(t *testing.T, dsn, upstream string) *gateway {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), gatewayEnv+"=1", gatewayStoreEnv+"="+dsn, gatewayUpstreamEnv+"="+upstream)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the gateway did not start")
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, ok, line)
	g := &gateway{cmd: cmd, base: "http://" + addr}
	t.Cleanup(func() {
		if g.cmd.ProcessState == nil {
			_ = g.cmd.Process.Kill()
			_ = g.cmd.Wait()
		}
	})
	return g
}

func (g *gateway) kill(t *testing.T) {
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGKILL))
	_ = g.cmd.Wait()
}

func (g *gateway) term(t *testing.T) {
	require.NoError(t, g.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, g.cmd.Wait())
}

var testHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

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

func startMock(t *testing.T, cfg mock.Config) *mock.Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	m, err := mock.New(cfg)
	require.NoError(t, err)
	require.NoError(t, m.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	return m
}

func mockCalls(m *mock.Server) int64 {
	var n int64
	for _, c := range m.Stats().Overall.ByStatus {
		n += c
	}
	return n
}

func batchFile(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%05d","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"job %d"}]}}`+"\n", i, i)
	}
	return b.String()
}

// waitBatchEnded polls a batch until it ended.
func waitBatchEnded(t *testing.T, base, id string, limit time.Duration) BatchView {
	t.Helper()
	var v BatchView
	require.Eventually(t, func() bool {
		code, body := httpDo(t, "GET", base+"/v1/batches/"+id, "")
		require.Equal(t, 200, code, string(body))
		v = decode[BatchView](t, body)
		return v.ProcessingStatus == "ended"
	}, limit, 50*time.Millisecond, "batch %s never ended: %+v", id, v)
	return v
}

// countStates lists every job of the store by state.
func countStates(t *testing.T, st queue.Store) map[queue.State]int {
	t.Helper()
	out := map[queue.State]int{}
	var after int64
	for {
		page, err := st.List(context.Background(), queue.ListParams{After: after, Limit: queue.ListLimitMax})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			out[j.State]++
		}
		if page.Next == 0 {
			return out
		}
		after = page.Next
	}
}

func TestCrashKillMidFlightLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs subprocesses")
	}
	t.Parallel()
	const jobs = 1000
	m := startMock(t, mock.Config{TTFT: 150 * time.Millisecond})
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "crash.db")
	g := startGateway(t, dsn, m.URL())
	code, body := httpDo(t, "POST", g.base+"/v1/batches?upstream=mock", batchFile(jobs))
	require.Equal(t, 200, code, string(body))
	batch := decode[BatchView](t, body)

	// Kill once a good part of the work is done and much is in flight.
	require.Eventually(t, func() bool { return m.Stats().Overall.ByStatus["200"] >= jobs/4 }, time.Minute, 5*time.Millisecond)
	g.kill(t)
	callsAtKill := mockCalls(m)

	st, err := queue.Open(context.Background(), dsn, queue.Options{})
	require.NoError(t, err)
	atKill := countStates(t, st)
	require.NoError(t, st.Close())
	require.Equal(t, jobs, atKill[queue.StateQueued]+atKill[queue.StateRunning]+atKill[queue.StateSucceeded], "no job lost at the kill: %v", atKill)
	require.Positive(t, atKill[queue.StateRunning], "the kill must catch jobs in flight")

	g2 := startGateway(t, dsn, m.URL())
	v := waitBatchEnded(t, g2.base, batch.ID, 2*time.Minute)
	g2.term(t)

	st, err = queue.Open(context.Background(), dsn, queue.Options{})
	require.NoError(t, err)
	final := countStates(t, st)
	require.NoError(t, st.Close())
	require.Equal(t, map[queue.State]int{queue.StateSucceeded: jobs}, final, "every job ends succeeded, exactly once")
	require.Equal(t, jobs, v.Counts.Succeeded)

	calls := mockCalls(m)
	extra := calls - jobs
	t.Logf("crash figures: jobs=%d running at kill=%d queued at kill=%d succeeded at kill=%d; mock calls at kill=%d, total=%d, extra=%d",
		jobs, atKill[queue.StateRunning], atKill[queue.StateQueued], atKill[queue.StateSucceeded], callsAtKill, calls, extra)
	require.GreaterOrEqual(t, extra, int64(0))
	require.LessOrEqual(t, extra, int64(atKill[queue.StateRunning]), "at most one extra call per job in flight at the kill")
}

// postgresDSN creates a fresh schema for one test (dropped at cleanup). It
// skips when SLUICE_TEST_POSTGRES_URL is unset and fails when it is set
// but unreachable.
func postgresDSN(t *testing.T) string {
	t.Helper()
	base := os.Getenv("SLUICE_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("SLUICE_TEST_POSTGRES_URL is not set; skipping PostgreSQL tests")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err, "SLUICE_TEST_POSTGRES_URL is set but PostgreSQL is unreachable")
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "sluice_jobs_test_" + hex.EncodeToString(b[:])
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		require.NoError(t, err)
		_, err = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err)
		require.NoError(t, c.Close(context.Background()))
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestTwoGatewaysOnPostgresRunEachJobOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	t.Parallel()
	const jobs = 5000
	dsn := postgresDSN(t)
	m := startMock(t, mock.Config{TTFT: 2 * time.Millisecond})
	// Migrate once before two processes race to.
	st, err := queue.Open(context.Background(), dsn, queue.Options{MaxConns: 4})
	require.NoError(t, err)
	g1 := startGateway(t, dsn, m.URL())
	g2 := startGateway(t, dsn, m.URL())
	start := time.Now()
	code, body := httpDo(t, "POST", g1.base+"/v1/batches?upstream=mock", batchFile(jobs))
	require.Equal(t, 200, code, string(body))
	batch := decode[BatchView](t, body)
	v := waitBatchEnded(t, g2.base, batch.ID, 5*time.Minute)
	elapsed := time.Since(start)
	g1.term(t)
	g2.term(t)

	require.Equal(t, jobs, v.Counts.Succeeded, "%+v", v.Counts)
	owners := map[string]int{}
	var after int64
	for {
		page, err := st.List(context.Background(), queue.ListParams{After: after, Limit: queue.ListLimitMax})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			require.Equal(t, queue.StateSucceeded, j.State)
			require.Zero(t, j.Stalls, "job %d was rescued", j.ID)
			owners[j.Lease.Owner]++
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	require.NoError(t, st.Close())
	calls := mockCalls(m)
	t.Logf("two gateways on PostgreSQL: %d jobs in %v (%.0f jobs/s), mock calls=%d, per owner=%v", jobs, elapsed.Round(time.Millisecond), float64(jobs)/elapsed.Seconds(), calls, owners)
	require.Equal(t, int64(jobs), calls, "no job ran twice")
	require.Len(t, owners, 2, "both gateways ran jobs")
}
