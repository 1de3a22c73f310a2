package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/mock"
)

// clusterView is the part of /v1/status this test reads.
type clusterView struct {
	Cluster struct {
		Degraded  bool `json:"degraded"`
		Upstreams []struct {
			Share    float64 `json:"share"`
			Fallback bool    `json:"fallback"`
		} `json:"upstreams"`
	} `json:"cluster"`
}

func getJSON(t *testing.T, u string, v any) int {
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

// maxInWindow is the most instants of ts (sorted) within any window of
// length w that lies inside [from, to].
func maxInWindow(ts []time.Time, w time.Duration, from, to time.Time) int {
	best := 0
	for i, a := range ts {
		if a.Before(from) || a.Add(w).After(to) {
			continue
		}
		j := i
		for j < len(ts) && ts[j].Before(a.Add(w)) {
			j++
		}
		best = max(best, j-i)
	}
	return best
}

// TestClusterPostgresOutageUnderLoad: three sluice serve processes share
// one quota through PostgreSQL reached through a TCP proxy; most of the
// load goes to node a. The proxy is cut for 10 s (issue 14: PostgreSQL
// stopped for 10 s): every node falls back to 1/3 of the quota (a, whose
// demand had most of it, sends no more than a third over any 3 s window),
// /readyz says so while staying ready, the
// provider sees no 429, no request is lost; once the proxy is back,
// sharing resumes (no node degraded, a's share above a third again).
func TestClusterPostgresOutageUnderLoad(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	bin := buildSluice(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := jobstoretest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	proxied := u.String()

	const rpm = 2400 // 40/s, depth 40 (burst_seconds: 1)
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: 1, TTFT: 20 * time.Millisecond})
	require.NoError(t, err)
	dir := t.TempDir()
	var nodes []*node
	var recs []*recorder
	for _, name := range []string{"a", "b", "c"} {
		rec := &recorder{next: m.Handler()}
		up := httptest.NewServer(rec)
		t.Cleanup(up.Close)
		recs = append(recs, rec)
		st := stores{jobs: "sqlite:" + dir + "/" + name + ".db", cluster: proxied}
		nodes = append(nodes, startNode(t, bin, dir, name, st, up.URL, rpm, 6))
	}

	body := `{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	var started, ok, failed atomic.Int64
	send := func(i int) bool {
		req, _ := http.NewRequest(http.MethodPost, nodes[i].base+"/anthropic/v1/messages", strings.NewReader(body))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 36 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; !stop.Load(); k++ {
				started.Add(1)
				first := 0 // 2 workers in 3 send to a
				if w%3 == 2 {
					first = 1 + k%2
				}
				done := false
				for try := 0; try < 30 && !done; try++ {
					done = send((first + try) % 3)
				}
				if done {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}

	time.Sleep(3 * time.Second) // sharing settles: a's demand gets it most of the quota
	var before clusterView
	getJSON(t, nodes[0].base+"/v1/status", &before)
	require.False(t, before.Cluster.Degraded)
	cut := time.Now()
	proxy.Cut()
	// /readyz says so, and the node stays ready.
	require.Eventually(t, func() bool {
		var r struct {
			Ready  bool `json:"ready"`
			Checks []struct {
				Name   string `json:"name"`
				Detail string `json:"detail"`
			} `json:"checks"`
		}
		code := getJSON(t, nodes[0].base+"/readyz", &r)
		for _, c := range r.Checks {
			if c.Name == "cluster" && strings.Contains(c.Detail, "unreachable") {
				require.Equal(t, http.StatusOK, code)
				require.True(t, r.Ready)
				return true
			}
		}
		return false
	}, 5*time.Second, 50*time.Millisecond)
	var during clusterView
	getJSON(t, nodes[0].base+"/v1/status", &during)
	require.True(t, during.Cluster.Degraded)
	require.InDelta(t, 1.0/3, during.Cluster.Upstreams[0].Share, 1e-9)
	time.Sleep(time.Until(cut.Add(10 * time.Second)))
	restored := time.Now()
	proxy.Restore()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			var v clusterView
			getJSON(t, n.base+"/v1/status", &v)
			if v.Cluster.Degraded {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "sharing resumes on every node")
	require.Eventually(t, func() bool {
		var v clusterView
		getJSON(t, nodes[0].base+"/v1/status", &v)
		return v.Cluster.Upstreams[0].Share > 0.4
	}, 10*time.Second, 50*time.Millisecond, "a's demand gets it more than its fallback third again")
	stop.Store(true)
	wg.Wait()

	require.Zero(t, failed.Load(), "no request lost")
	require.Equal(t, started.Load(), ok.Load())
	st := m.Stats().Overall
	t.Logf("mock: by status %v, %d requests answered, share before the cut %.2f", st.ByStatus, ok.Load(), before.Cluster.Upstreams[0].Share)
	require.LessOrEqual(t, float64(st.ByStatus["429"]), 0.01*float64(ok.Load()), "the provider's 429s")

	// Node a on its fallback: at most a third of the quota over any 3 s
	// window from 1.5 s after the cut (the lease's life, then the
	// fallback) until the store is back: (rate·3 s + depth)/3, plus one.
	recs[0].mu.Lock()
	arrived := slices.Clone(recs[0].arrived)
	recs[0].mu.Unlock()
	const window = 3 * time.Second
	bound := (float64(rpm)/60*window.Seconds() + float64(rpm)/60) / 3
	got := maxInWindow(arrived, window, cut.Add(1500*time.Millisecond), restored)
	rate := func(from, to time.Time) float64 {
		n := 0
		for _, a := range arrived {
			if !a.Before(from) && a.Before(to) {
				n++
			}
		}
		return float64(n) / to.Sub(from).Seconds()
	}
	sharing, fallback := rate(cut.Add(-2*time.Second), cut), rate(cut.Add(1500*time.Millisecond), restored)
	t.Logf("node a: at most %d requests in any %v on its fallback share (bound %.1f); %.1f/s before the cut, %.1f/s on the fallback (quota %d/s)",
		got, window, bound, sharing, fallback, rpm/60)
	require.LessOrEqual(t, float64(got), bound+1)
	require.Greater(t, sharing, fallback, "a sent more while sharing than on its fallback")
}
