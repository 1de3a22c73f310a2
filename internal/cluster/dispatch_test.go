package cluster_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// dispatchMember adapts a real dispatcher to cluster.Member, as the
// server does.
type dispatchMember struct {
	d   *dispatch.Dispatcher
	key string
}

func (m dispatchMember) Key() string            { return m.key }
func (m dispatchMember) Load() flow.ClusterLoad { return m.d.ClusterLoad() }
func (m dispatchMember) Apply(share float64, slots int) float64 {
	return m.d.SetClusterShare(share, slots)
}
func (m dispatchMember) Credit(f float64)      { m.d.CreditCluster(f) }
func (m dispatchMember) Pause(until time.Time) { m.d.ApplyPause(until) }
func (m dispatchMember) Breaker(openUntil time.Time, probe bool, since time.Time) {
	m.d.ApplyClusterBreaker(openUntil, probe, since)
}
func (m dispatchMember) Heard() []flow.ClusterReport   { return m.d.ClusterReports() }
func (m dispatchMember) Adopt(ls []flow.ClusterReport) { m.d.AdoptClusterReports(ls) }

// startClusterNodes starts one dispatcher and one cluster node per
// upstream URL, all on clk and sharing backend, the nodes named a, b, c….
func startClusterNodes(t *testing.T, clk clock.Clock, backend cluster.Backend, urls []string, mod func(*dispatch.Config)) []*dispatch.Dispatcher {
	t.Helper()
	ids := make([]string, len(urls))
	for i := range ids {
		ids[i] = string(rune('a' + i))
	}
	ds, _ := startClusterNodesAs(t, clk, backend, urls, ids, mod)
	return ds
}

// startClusterNodesAs is startClusterNodes with the nodes' configured ids.
func startClusterNodesAs(t *testing.T, clk clock.Clock, backend cluster.Backend, urls, ids []string,
	mod func(*dispatch.Config)) ([]*dispatch.Dispatcher, []*cluster.Node) {
	t.Helper()
	return startClusterNodesWith(t, clk, backend, urls, ids,
		cluster.Config{SyncInterval: 100 * time.Millisecond, LeaseTTL: time.Second}, mod)
}

// startClusterNodesWith is startClusterNodesAs with the nodes' cluster
// config (its NodeID is each node's id).
func startClusterNodesWith(t *testing.T, clk clock.Clock, backend cluster.Backend, urls, ids []string,
	ccfg cluster.Config, mod func(*dispatch.Config)) ([]*dispatch.Dispatcher, []*cluster.Node) {
	t.Helper()
	ctx := context.Background()
	var ds []*dispatch.Dispatcher
	var ns []*cluster.Node
	for i, u := range urls {
		cfg := dispatch.Config{
			Config: upcfg.Config{Name: "up", Protocol: llm.Anthropic, BaseURL: u, APIKey: "sk-shared", JitterAllowance: -1},
			Clock:  clk,
			Rand:   rand.New(rand.NewPCG(uint64(i)+1, 2)),
		}
		if mod != nil {
			mod(&cfg)
		}
		d, err := dispatch.New(cfg)
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		ccfg.NodeID = ids[i]
		n, err := cluster.NewNode(ccfg, backend, []cluster.Member{dispatchMember{d: d, key: cluster.Key("up", "sk-shared")}}, clk, nil, nil)
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		t.Cleanup(func() {
			require.NoError(t, n.Stop(ctx))
			require.NoError(t, d.Stop(ctx))
		})
		ds, ns = append(ds, d), append(ns, n)
	}
	return ds, ns
}

func clusterRequest(deadline time.Time, class llm.Priority) *dispatch.Request {
	return &dispatch.Request{
		Method:   http.MethodPost,
		Path:     "/v1/messages",
		Header:   http.Header{},
		Body:     []byte(`{"model":"claude-test","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`),
		Cost:     provider.Cost{Model: "claude-test", InputTokens: 10, OutputTokens: 8},
		Priority: class,
		Deadline: deadline,
	}
}

// do sends r and reports its error (the body read and closed).
func do(d *dispatch.Dispatcher, r *dispatch.Request) error {
	return doCtx(context.Background(), d, r)
}

func doCtx(ctx context.Context, d *dispatch.Dispatcher, r *dispatch.Request) error {
	resp, err := d.Do(ctx, r)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return errors.Join(err, resp.Body.Close())
}

// TestSharedBreakerBoundsProbesClusterWide: two nodes (real dispatchers on
// one fake clock, sharing a Memory backend) in front of one upstream that
// goes down. Node a sees the failures and opens; b's breaker opens too
// without b sending anything; through the outage the upstream gets one
// probe per open period cluster-wide (half_open_probes: 1), never one from
// each node; when it comes back one probe's success closes both and every
// request is answered.
func TestSharedBreakerBoundsProbesClusterWide(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	var calls [2][]time.Time // per node, on the fake clock, while down
	var okCalls atomic.Int64
	handler := func(node int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			if down.Load() {
				mu.Lock()
				calls[node] = append(calls[node], fc.Now())
				mu.Unlock()
				w.WriteHeader(529)
				_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
				return
			}
			okCalls.Add(1)
			_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}`)
		}
	}
	var urls []string
	for i := range 2 {
		s := httptest.NewServer(handler(i))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	const openTimeout = 2 * time.Second
	ds := startClusterNodes(t, fc, cluster.NewMemory(fc), urls, func(c *dispatch.Config) {
		c.Breaker.ConsecutiveFailures = 3
		c.Breaker.OpenTimeout = openTimeout
		c.Breaker.HalfOpenProbes = 1
		c.Retry.MaxAttempts = 10
	})
	runClock(t, fc)

	// Requests at a only, until a's breaker opens.
	deadline := fc.Now().Add(10 * time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	send := func(d *dispatch.Dispatcher) {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- do(d, clusterRequest(deadline, llm.Normal)) }()
	}
	for range 4 {
		send(ds[0])
	}
	require.Eventually(t, func() bool { return ds[0].Snapshot().Breaker != flow.Closed }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return ds[1].Snapshot().Breaker != flow.Closed }, 10*time.Second, time.Millisecond,
		"b's breaker opens from a's outage")
	mu.Lock()
	require.Empty(t, calls[1], "b sent nothing to open its breaker")
	tripped := fc.Now()
	mu.Unlock()

	// Both nodes have work through the outage.
	for range 4 {
		send(ds[1])
		send(ds[0])
	}
	require.Eventually(t, func() bool { return fc.Now().Sub(tripped) > 10*openTimeout }, time.Minute, 10*time.Millisecond)
	down.Store(false)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "every request answered once the upstream is back")
	}
	require.Eventually(t, func() bool {
		return ds[0].Snapshot().Breaker == flow.Closed && ds[1].Snapshot().Breaker == flow.Closed
	}, 10*time.Second, time.Millisecond)

	// The probes during the outage: one per open period (at least 75% of
	// open_timeout apart, less the clock's stepping), from either node.
	mu.Lock()
	probes := append(slices.Clone(calls[0][3:]), calls[1]...) // a's first 3 calls tripped it
	mu.Unlock()
	slices.SortFunc(probes, func(a, b time.Time) int { return a.Compare(b) })
	t.Logf("outage: %d probes in %v (open_timeout %v)", len(probes), 10*openTimeout, openTimeout)
	require.NotEmpty(t, probes)
	require.LessOrEqual(t, len(probes), 10*4/3+1, "one probe per open period cluster-wide")
	for i := 1; i < len(probes); i++ {
		require.GreaterOrEqual(t, probes[i].Sub(probes[i-1]), openTimeout*3/4-300*time.Millisecond,
			"probes %d and %d too close: %v", i-1, i, probes)
	}
}

// TestClusterSpendsBurstWithinWindowBound: three real dispatchers on one
// fake clock share a quota of 20 requests/s with a 1 s burst (depth 20)
// through a Memory backend, and 200 requests arrive at once, spread over
// them, right after they start. The nodes start empty (a raised share
// starts empty), so without the burst pool the cluster could send only
// the refill; with it the first node to see demand is credited the
// provider's burst. The cluster's sends, sampled at every step of the
// clock, never exceed rate·t + depth over any window (plus one step's
// refill for the sampling), the burst is spent in the first second, and
// the whole run takes close to the ideal (200 − 20) / 20 = 9 s.
func TestClusterSpendsBurstWithinWindowBound(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}`)
	})
	var urls []string
	for range 3 {
		s := httptest.NewServer(handler)
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	const rate, depth, total = 20.0, 20.0, 200
	ds := startClusterNodes(t, fc, cluster.NewMemory(fc), urls, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = rate * 60
		c.BurstSeconds = depth / rate
		c.SafetyMargin, c.MaxSafetyMargin = 1, 1
	})
	// The sends: the dispatchers' debited requests, sampled before every
	// step of the clock (a send at a step's instant is seen at the latest
	// one step later).
	const step = 10 * time.Millisecond
	type sample struct {
		at   time.Duration
		sent float64
	}
	var samples []sample
	stop := make(chan struct{})
	stepped := make(chan struct{})
	start := fc.Now()
	go func() {
		defer close(stepped)
		for {
			var sent float64
			for _, d := range ds {
				sent += d.ClusterLoad().Debited[flow.Requests]
			}
			samples = append(samples, sample{fc.Now().Sub(start), sent})
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				fc.Advance(step)
			}
		}
	}()
	deadline := fc.Now().Add(10 * time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for i := range total {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- do(ds[i%3], clusterRequest(deadline, llm.Normal)) }()
	}
	wg.Wait()
	close(stop)
	<-stepped
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var sent float64
	for _, d := range ds {
		sent += d.ClusterLoad().Debited[flow.Requests]
	}
	samples = append(samples, sample{fc.Now().Sub(start) + step, sent})
	require.InDelta(t, total, sent, 0.5)

	// Every window [a, b] between samples: sent(b) − sent(a−) ≤ rate·(b − a + step) + depth.
	first := slices.IndexFunc(samples, func(s sample) bool { return s.sent > 0 })
	require.GreaterOrEqual(t, first, 1)
	for b := range samples {
		for a := 1; a <= b; a++ {
			n := samples[b].sent - samples[a-1].sent
			w := samples[b].at - samples[a].at + step
			require.LessOrEqual(t, n, rate*w.Seconds()+depth+1e-6, "window (%v, %v]", samples[a-1].at, samples[b].at)
		}
	}
	// The burst is spent at once: in the first second of sends the cluster
	// sends the depth and a second's refill (without the pool, about the
	// refill alone).
	var firstSecond float64
	for _, s := range samples[first:] {
		if s.at-samples[first-1].at <= time.Second {
			firstSecond = s.sent
		}
	}
	last := slices.IndexFunc(samples, func(s sample) bool { return s.sent >= total-0.5 })
	took := samples[last].at - samples[first-1].at
	ideal := (total - depth) / rate
	t.Logf("first second: %.0f sent (depth + refill: %.0f); all %d in %v (ideal %.1fs: %.1f%%)",
		firstSecond, depth+rate, total, took, ideal, 100*ideal/took.Seconds())
	require.GreaterOrEqual(t, firstSecond, 0.8*(depth+rate), "the burst is spent in the first second")
	require.GreaterOrEqual(t, ideal/took.Seconds(), 0.9, "close to the ideal, counting the burst")
}

// runClock runs fc at 10× real time until the test ends.
func runClock(t *testing.T, fc *clock.Fake) {
	stop := make(chan struct{})
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				fc.Advance(10 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-stepped })
}
