package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/mock"
)

// buildSluice builds the sluice binary (without -race) once per test.
func buildSluice(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// recorder wraps the mock: it logs when every request reached it and
// can answer one request with an injected 429.
type recorder struct {
	next    http.Handler
	mu      sync.Mutex
	arrived []time.Time
	rated   time.Time // when the injected 429 was answered
	inject  atomic.Bool
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	if r.inject.CompareAndSwap(true, false) {
		r.mu.Lock()
		r.rated = now
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("retry-after", "5")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"injected"}}`)
		return
	}
	r.mu.Lock()
	r.arrived = append(r.arrived, now)
	r.mu.Unlock()
	r.next.ServeHTTP(w, req)
}

type node struct {
	cmd  *exec.Cmd
	base string
	done chan error
	// fallbacks counts the node's "falling back to a local share"
	// warnings: a sync that missed its lease, which a loaded machine can
	// cause without any store fault.
	fallbacks atomic.Int64
}

// stores says where a test node keeps its jobs and its shared state.
type stores struct {
	jobs    string // store:
	cluster string // cluster.store: ("": the job store's PostgreSQL)
	sync    string // cluster.sync_interval ("": 100ms)
	ttl     string // cluster.lease_ttl ("": 1s)
}

// postgresStores: jobs and shared state on one PostgreSQL schema.
func postgresStores(dsn string, shared bool) func(name string) stores {
	return func(string) stores {
		if !shared {
			return stores{jobs: dsn, cluster: "off"}
		}
		return stores{jobs: dsn}
	}
}

// redisStores: jobs on each node's own SQLite file, shared state on
// Redis under a prefix of the test's own.
func redisStores(t *testing.T, url string) func(name string) stores {
	dir := t.TempDir()
	var b [6]byte
	_, _ = rand.Read(b[:])
	u, err := url2(url, "sluice-test-"+hex.EncodeToString(b[:]))
	require.NoError(t, err)
	return func(name string) stores {
		return stores{jobs: "sqlite:" + filepath.Join(dir, name+".db"), cluster: u}
	}
}

func url2(base, prefix string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("key_prefix", prefix)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// clusterRedisURL returns SLUICE_TEST_REDIS_URL: skipped when unset,
// failed when set but unreachable.
func clusterRedisURL(t *testing.T) string {
	u := os.Getenv("SLUICE_TEST_REDIS_URL")
	if u == "" {
		t.Skip("SLUICE_TEST_REDIS_URL is not set; skipping the multi-process cluster test on Redis")
	}
	b, err := cluster.OpenRedis(context.Background(), u)
	require.NoError(t, err, "SLUICE_TEST_REDIS_URL is set but Redis is unreachable")
	require.NoError(t, b.Close())
	return u
}

func startNode(t *testing.T, bin, dir, name string, st stores, upstream string, rpm int, maxConc int) *node {
	cfg := filepath.Join(dir, name+".yaml")
	clusterStore := ""
	if st.sync == "" {
		st.sync = "100ms"
	}
	if st.ttl == "" {
		st.ttl = "1s"
	}
	if st.cluster != "" {
		clusterStore = fmt.Sprintf("store: %q", st.cluster)
	}
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `listen: 127.0.0.1:0
store: %q
cluster:
  %s
  node_id: %s
  sync_interval: %s
  lease_ttl: %s
upstreams:
  - name: anthropic
    protocol: anthropic
    base_url: %s
    api_key: test-key
    burst_seconds: 1
    safety_margin: 1
    limits:
      requests_per_minute: %d
      max_concurrency: %d
`, st.jobs, clusterStore, name, st.sync, st.ttl, upstream, rpm, maxConc), 0o600))
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Dir = dir // the default spool directory (./sluice-spool) goes there, not into the package
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	n := &node{cmd: cmd, done: make(chan error, 1)}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "sluice listening on "); ok {
			n.base = strings.TrimSpace(rest)
			break
		}
	}
	require.NotEmpty(t, n.base, "node %s did not start", name)
	go func() {
		for lines.Scan() {
			if strings.Contains(lines.Text(), "falling back to a local share") {
				n.fallbacks.Add(1)
			}
		}
		n.done <- cmd.Wait()
	}()
	// The exit status after SIGTERM (or a kill) is not what this test checks.
	t.Cleanup(func() { _ = stopProcess(cmd, n.done) })
	return n
}

// stopProcess sends SIGTERM, kills the process if it has not exited 20 s
// later, and returns how it ended.
func stopProcess(cmd *exec.Cmd, done <-chan error) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return <-done
	}
}

// TestClusterThreeNodesShareOneQuota runs three sluice serve processes on
// one PostgreSQL schema in front of the mock with one quota, spreads the
// requests over them, kills one mid-run and injects a RATE 429 with
// retry-after: 5 at one node.
func TestClusterThreeNodesShareOneQuota(t *testing.T) {
	t.Parallel()
	threeNodesShareOneQuota(t, postgresStores(jobstoretest.PostgresDSN(t), true))
}

// TestClusterThreeNodesShareOneQuotaRedis is the same run with the shared
// state on Redis (and each node's jobs on its own SQLite file).
func TestClusterThreeNodesShareOneQuotaRedis(t *testing.T) {
	t.Parallel()
	threeNodesShareOneQuota(t, redisStores(t, clusterRedisURL(t)))
}

func threeNodesShareOneQuota(t *testing.T, storesOf func(name string) stores) {
	bin := buildSluice(t)
	const rpm, total = 2400, 420 // 40/s, depth 40
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: 1, TTFT: 20 * time.Millisecond})
	require.NoError(t, err)
	rec := &recorder{next: m.Handler()}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	var nodes []*node
	const maxConc = 4
	for _, name := range []string{"a", "b", "c"} {
		st := storesOf(name)
		// A lease that outlives a sync slowed by a loaded machine (each
		// store call is bounded by a third of it): a node that misses its
		// lease falls back to a local share, which the cap check below
		// allows for as documented.
		st.ttl = "2s"
		nodes = append(nodes, startNode(t, bin, dir, name, st, up.URL, rpm, maxConc))
	}

	body := `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	var alive [3]atomic.Bool
	for i := range alive {
		alive[i].Store(true)
	}
	var next, ok, failed atomic.Int64
	var gw429, firstBad atomic.Int64
	send := func(i int) bool {
		req, _ := http.NewRequest(http.MethodPost, nodes[i].base+"/anthropic/v1/messages", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false // the node died: another one takes the request
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			gw429.Add(1)
			return false
		}
		if resp.StatusCode != http.StatusOK && firstBad.CompareAndSwap(0, int64(resp.StatusCode)) {
			t.Logf("first failure: %d", resp.StatusCode)
		}
		return resp.StatusCode == http.StatusOK
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > total {
					return
				}
				done := false
				for try := 0; try < 20 && !done; try++ {
					i := int(k+int64(try)) % 3
					if !alive[i].Load() {
						continue
					}
					done = send(i)
				}
				if done {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	// Mid-run: kill c (SIGKILL), then a RATE 429 with retry-after: 5.
	time.Sleep(3 * time.Second)
	alive[2].Store(false)
	require.NoError(t, nodes[2].cmd.Process.Signal(syscall.SIGKILL))
	time.Sleep(time.Second)
	rec.inject.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	require.EqualValues(t, total, ok.Load(), "every request answered (failed %d)", failed.Load())

	st := m.Stats().Overall
	t.Logf("mock: by status %v, admitted %d requests, peak in flight %d, gateway 429/503 answers %d, %v",
		st.ByStatus, st.Admitted.Requests, st.PeakInFlight, gw429.Load(), elapsed)
	provider429 := st.ByStatus["429"]
	require.LessOrEqual(t, float64(provider429), 0.01*float64(total), "the provider's 429s")
	// max_concurrency is cluster-wide. A node whose syncs missed its lease
	// (k of them) applies max_concurrency/N slots of its own while the
	// others re-grant its expired slots: docs/cluster.md bounds the
	// cluster at cap + k·max(cap/N, 1) until the handover ends (N ≥ 2
	// here: c's lease is seen before it dies).
	capAllowed, k := int64(maxConc), 0
	for _, n := range nodes[:2] {
		if n.fallbacks.Load() > 0 {
			k++
		}
	}
	if k > 0 {
		capAllowed += int64(k * max(maxConc/2, 1))
		t.Logf("%d node(s) fell back to a local share (syncs missed the lease): the cap allowed is %d", k, capAllowed)
	}
	require.LessOrEqual(t, st.PeakInFlight, capAllowed, "max_concurrency is cluster-wide (%d node(s) fell back)", k)

	// The injected pause: after it, nothing reached the upstream for 5 s,
	// give or take the pause poll (50 ms) and a NOTIFY round trip.
	rec.mu.Lock()
	rated, arrived := rec.rated, slices.Clone(rec.arrived)
	rec.mu.Unlock()
	require.False(t, rated.IsZero(), "the 429 was injected")
	const slack = 200 * time.Millisecond
	var during int
	for _, a := range arrived {
		if a.After(rated.Add(slack)) && a.Before(rated.Add(5*time.Second-100*time.Millisecond)) {
			during++
		}
	}
	require.Zero(t, during, "requests sent during the shared pause")

	// Utilisation of the binding dimension (RPM) outside the pause: the
	// ideal is (total − depth)/rate.
	first, last := arrived[0], arrived[len(arrived)-1]
	busy := last.Sub(first) - 5*time.Second
	ideal := time.Duration(float64(total-rpm/60) / (rpm / 60.0) * float64(time.Second))
	util := ideal.Seconds() / busy.Seconds()
	t.Logf("utilisation %.1f%% (ideal %v, busy %v outside the 5 s pause)", 100*util, ideal, busy)
	require.GreaterOrEqual(t, util, 0.85)

	// The survivors hold the whole quota again: c's lease is gone.
	var status struct {
		Cluster struct {
			Upstreams []struct {
				BurstPool     *float64 `json:"burst_pool"`
				BurstCredited *float64 `json:"burst_credited"`
				Nodes         []struct {
					Node  string  `json:"node"`
					Share float64 `json:"share"`
				} `json:"nodes"`
				Learned []learnedStatus `json:"learned"`
			} `json:"upstreams"`
		} `json:"cluster"`
	}
	resp, err := http.Get(nodes[0].base + "/v1/status")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&status))
	require.NoError(t, resp.Body.Close())
	require.Len(t, status.Cluster.Upstreams, 1)
	u := status.Cluster.Upstreams[0]
	require.NotNil(t, u.BurstPool)
	require.NotNil(t, u.BurstCredited)
	require.True(t, *u.BurstPool >= 0 && *u.BurstPool <= 1, "pool %v", *u.BurstPool)
	require.GreaterOrEqual(t, *u.BurstCredited, 0.0)
	for _, n := range status.Cluster.Upstreams[0].Nodes {
		require.NotEqual(t, "c", n.Node, "the killed node's lease expired")
	}
	// The limit the provider's headers reported is shared, with who
	// reported it.
	learned := status.Cluster.Upstreams[0].Learned
	i := slices.IndexFunc(learned, func(l learnedStatus) bool { return l.Dimension == "requests" })
	require.GreaterOrEqual(t, i, 0, "%+v", learned)
	require.InDelta(t, float64(rpm), learned[i].Limit, 0)
	require.Contains(t, []string{"a", "b", "c"}, learned[i].LimitNode)
}

// learnedStatus is a shared provider report in /v1/status's cluster
// section.
type learnedStatus struct {
	Key       string  `json:"key"`
	Dimension string  `json:"dimension"`
	Limit     float64 `json:"limit"`
	LimitNode string  `json:"limit_node"`
}

// TestClusterFigures measures, for BENCHMARKS.md, the provider's 429s and
// the RPM utilisation of n sluice serve processes sharing (or not) one
// quota on the mock. It runs only with SLUICE_CLUSTER_FIGURES=1.
func TestClusterFigures(t *testing.T) {
	if os.Getenv("SLUICE_CLUSTER_FIGURES") == "" {
		t.Skip("set SLUICE_CLUSTER_FIGURES=1 to measure")
	}
	bin := buildSluice(t)
	for _, c := range []struct {
		n      int
		shared bool
		redis  bool
	}{{1, true, false}, {3, false, false}, {3, true, false}, {2, true, false}, {5, true, false}, {3, true, true}, {5, true, true}} {
		if only := os.Getenv("SLUICE_CLUSTER_FIGURES_NODES"); only != "" && only != fmt.Sprint(c.n) {
			continue
		}
		store := "postgres"
		if c.redis {
			store = "redis"
		}
		if only := os.Getenv("SLUICE_CLUSTER_FIGURES_STORE"); only != "" && only != store {
			continue
		}
		t.Run(fmt.Sprintf("nodes=%d/shared=%v/%s", c.n, c.shared, store), func(t *testing.T) {
			var storesOf func(string) stores
			if c.redis {
				storesOf = redisStores(t, clusterRedisURL(t))
			} else {
				storesOf = postgresStores(jobstoretest.PostgresDSN(t), c.shared)
			}
			const rpm, total = 3000, 600 // 50/s, as issue 14's RPM
			m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: 1, TTFT: 20 * time.Millisecond})
			require.NoError(t, err)
			rec := &recorder{next: m.Handler()}
			up := httptest.NewServer(rec)
			defer up.Close()
			dir := t.TempDir()
			var nodes []*node
			for i := range c.n {
				nodes = append(nodes, startNode(t, bin, dir, fmt.Sprintf("n%d", i), storesOf(fmt.Sprintf("n%d", i)), up.URL, rpm, 16))
			}
			body := `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
			var next, okN atomic.Int64
			var wg sync.WaitGroup
			for range 48 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := next.Add(1); k <= total; k = next.Add(1) {
						for try := range 50 {
							req, _ := http.NewRequest(http.MethodPost, nodes[int(k+int64(try))%c.n].base+"/anthropic/v1/messages", strings.NewReader(body))
							req.Header.Set("content-type", "application/json")
							req.Header.Set("anthropic-version", "2023-06-01")
							resp, err := http.DefaultClient.Do(req)
							if err != nil {
								continue
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
							if resp.StatusCode == http.StatusOK {
								okN.Add(1)
								break
							}
						}
					}
				}()
			}
			wg.Wait()
			st := m.Stats().Overall
			rec.mu.Lock()
			arrived := slices.Clone(rec.arrived)
			rec.mu.Unlock()
			busy := arrived[len(arrived)-1].Sub(arrived[0])
			// Store transactions and their time, from each node's histogram.
			syncs := metricSum(t, nodes, `sluice_cluster_sync_seconds_count{upstream="anthropic"}`)
			syncSeconds := metricSum(t, nodes, `sluice_cluster_sync_seconds_sum{upstream="anthropic"}`)
			ideal := float64(total-rpm/60) / (rpm / 60.0)
			// How the burst was spent: arrivals in the first second, and
			// the rate over the middle of the run.
			first := 0
			for _, a := range arrived {
				if a.Sub(arrived[0]) < time.Second {
					first++
				}
			}
			mid := float64(len(arrived)/2) / arrived[len(arrived)*3/4].Sub(arrived[len(arrived)/4]).Seconds()
			t.Logf("FIGURES nodes=%d shared=%v store=%s: %d arrivals in the first second (ideal %d), %.1f/s over the middle half",
				c.n, c.shared, store, first, 2*rpm/60, mid)
			t.Logf("FIGURES nodes=%d shared=%v store=%s: ok %d/%d, provider 429s %d (%.1f%%), upstream attempts %d, utilisation %.1f%% (ideal %.1fs with the provider's initial burst, took %.2fs; %.1f%% without it), peak in flight %d, store syncs %.0f (%.3f per admitted request, %.2f ms each on average)",
				c.n, c.shared, store, okN.Load(), total, st.ByStatus["429"], 100*float64(st.ByStatus["429"])/float64(total),
				len(arrived), 100*ideal/busy.Seconds(), ideal, busy.Seconds(), 100*float64(total)/(rpm/60.0)/busy.Seconds(), st.PeakInFlight,
				syncs, syncs/float64(total), 1000*syncSeconds/max(syncs, 1))
		})
	}
}

// metricSum adds up one sample (name with its labels, as /metrics prints
// it) over the nodes' /metrics.
func metricSum(t *testing.T, nodes []*node, sample string) float64 {
	t.Helper()
	var total float64
	for _, n := range nodes {
		resp, err := http.Get(n.base + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, sample+" "); ok {
				var v float64
				_, err := fmt.Sscan(rest, &v)
				require.NoError(t, err, "%s", line)
				total += v
			}
		}
	}
	return total
}

// TestClusterRequestCostFigures measures, for BENCHMARKS.md, what sharing
// one quota costs per request at 1,000 requests/s (issue 14): store syncs
// (and so round trips) per admitted request over 3 PostgreSQL-sharing
// nodes, and the added p99 against a single node under the same open-loop
// load. The quota is far above the load, so only the sharing's cost shows.
// It runs only with SLUICE_CLUSTER_FIGURES=1.
func TestClusterRequestCostFigures(t *testing.T) {
	if os.Getenv("SLUICE_CLUSTER_FIGURES") == "" {
		t.Skip("set SLUICE_CLUSTER_FIGURES=1 to measure")
	}
	bin := buildSluice(t)
	const rate, seconds, rpm = 1000, 4, 6_000_000
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: 1})
	require.NoError(t, err)
	up := httptest.NewServer(m.Handler())
	defer up.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	syncs := func(nodes []*node) float64 {
		return metricSum(t, nodes, `sluice_cluster_sync_seconds_count{upstream="anthropic"}`)
	}
	body := `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	load := func(nodes []*node) (ok int, p50, p99 time.Duration) {
		n := rate * seconds
		lat := make([]time.Duration, n)
		codes := make([]int, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, nodes[i%len(nodes)].base+"/anthropic/v1/messages", strings.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("anthropic-version", "2023-06-01")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				lat[i], codes[i] = time.Since(t0), resp.StatusCode
			}()
		}
		wg.Wait()
		var got []time.Duration
		for i, c := range codes {
			if c == http.StatusOK {
				ok++
				got = append(got, lat[i])
			}
		}
		slices.Sort(got)
		if len(got) == 0 {
			return 0, 0, 0
		}
		return ok, got[len(got)/2], got[len(got)*99/100]
	}
	dsn := jobstoretest.PostgresDSN(t)
	dir := t.TempDir()
	single := []*node{startNode(t, bin, dir, "solo", stores{jobs: "none", cluster: "off"}, up.URL, rpm, 512)}
	load(single) // warm-up
	okS, p50S, p99S := load(single)
	for _, interval := range []string{"100ms", "500ms"} { // the figures tests' and the default
		var three []*node
		for i := range 3 {
			three = append(three, startNode(t, bin, dir, fmt.Sprintf("n%s-%d", interval, i), stores{jobs: dsn, sync: interval}, up.URL, rpm, 512))
		}
		load(three) // warm-up: every node holds its share
		before := syncs(three)
		ok3, p503, p993 := load(three)
		during := syncs(three) - before
		t.Logf("FIGURES %d req/s for %d s: single node ok %d, p50 %v, p99 %v; 3 nodes (PostgreSQL, sync_interval %s) ok %d, p50 %v, p99 %v; added p99 %v; store syncs %.0f (%.4f per admitted request, 3-4 round trips each)",
			rate, seconds, okS, p50S.Round(10*time.Microsecond), p99S.Round(10*time.Microsecond), interval, ok3, p503.Round(10*time.Microsecond), p993.Round(10*time.Microsecond),
			(p993 - p99S).Round(10*time.Microsecond), during, during/float64(max(ok3, 1)))
		for _, n := range three {
			// Stopped now, so the next interval runs alone; the result
			// goes back for the cleanup's stopProcess.
			n.done <- stopProcess(n.cmd, n.done)
		}
	}
}
