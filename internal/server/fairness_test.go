package server

import (
	"context"
	"fmt"
	"github.com/sluicehq/sluice/internal/admit"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// Figures of TestClientLimitFairness: the upstream's quota (and the mock's)
// is fairUpstreamRPM; two clients each get half as their limit. quiet sends
// fairQuietRate, under its share; greedy sends ten times its share.
const (
	fairUpstreamRPM = 1200
	fairShareRPM    = fairUpstreamRPM / 2
	fairQuietRate   = 5                      // requests per second
	fairGreedyRate  = 10 * fairShareRPM / 60 // requests per second: 10× its share
	fairPhase       = 4 * time.Second        // each measured phase
	fairTTFT        = 100 * time.Millisecond // the mock's answer time
)

// TestClientLimitFairness runs the gateway against the mock provider in
// real time: quiet's p95 alone, then with greedy flooding at ten times its
// share, greedy held to its limit (requests_per_minute). Greedy's excess
// waits for greedy's own bucket or gets 429 (its 2 s deadline would pass);
// quiet's p95 must stay within 1.5× its unloaded p95. The figures are
// printed (BENCHMARKS.md records them):
//
//	go test -count=1 -run TestClientLimitFairness -v ./internal/server/
func TestClientLimitFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~10 s of real traffic")
	}
	// Not parallel: it measures latency, so it runs alone in its package.
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Limits: mock.Limits{RPM: fairUpstreamRPM}, BurstSeconds: 1,
		TTFT: fairTTFT, OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 7})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	// A one-second burst: greedy is held to its rate from the start (the
	// default, a whole minute, would let it send a minute's worth at once).
	share := admit.LimitValues{RequestsPerMinute: fairShareRPM, BurstSeconds: 1}
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up",
			Limits: upcfg.Limits{RequestsPerMinute: fairUpstreamRPM}}},
		Clients: []ClientConfig{{Name: "quiet", Key: "ck-quiet", Limits: admit.ClientLimits{LimitValues: share}},
			{Name: "greedy", Key: "ck-greedy", Limits: admit.ClientLimits{LimitValues: share}}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	url := "http://" + g.Addr() + "/claude/v1/messages"
	clk := clock.Real()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	t.Cleanup(hc.CloseIdleConnections)
	send := func(ctx context.Context, key string) (int, time.Duration) {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(tenantJobBody))
		if err != nil {
			return 0, 0
		}
		req.Header.Set("x-api-key", key)
		req.Header.Set("X-Sluice-Deadline", "2s")
		start := clk.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, clock.Since(clk, start)
	}
	// run sends at rate per second for fairPhase and returns the
	// latencies of the 200s and the count per status.
	run := func(ctx context.Context, key string, rate int) ([]time.Duration, map[int]int) {
		var mu sync.Mutex
		var lat []time.Duration
		codes := map[int]int{}
		var wg sync.WaitGroup
		n := int(fairPhase.Seconds()) * rate
		every := time.Second / time.Duration(rate)
		for i := range n {
			if i > 0 && clock.Sleep(ctx, clk, every) != nil {
				break
			}
			wg.Go(func() {
				code, d := send(ctx, key)
				mu.Lock()
				defer mu.Unlock()
				codes[code]++
				if code == http.StatusOK {
					lat = append(lat, d)
				}
			})
		}
		wg.Wait()
		return lat, codes
	}
	_, _ = run(t.Context(), "ck-quiet", fairQuietRate) // warm up connections
	alone, codes := run(t.Context(), "ck-quiet", fairQuietRate)
	require.Equal(t, map[int]int{200: len(alone)}, codes)

	ctx, cancel := context.WithCancel(t.Context())
	var greedyCodes map[int]int
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, greedyCodes = run(ctx, "ck-greedy", fairGreedyRate)
	}()
	loaded, codes := run(t.Context(), "ck-quiet", fairQuietRate)
	cancel()
	<-done
	require.Equal(t, map[int]int{200: len(loaded)}, codes, "quiet is never refused")

	p95Alone, p95Loaded := p95(alone), p95(loaded)
	fmt.Printf("fairness: upstream %d rpm, client limit %d rpm each; quiet %d/s, greedy %d/s (10x its share)\n",
		fairUpstreamRPM, fairShareRPM, fairQuietRate, fairGreedyRate)
	fmt.Printf("fairness: quiet p95 alone %v, with greedy %v (ratio %.2f, bound 1.5); greedy answers %v\n",
		p95Alone.Round(time.Millisecond), p95Loaded.Round(time.Millisecond), float64(p95Loaded)/float64(p95Alone), greedyCodes)
	require.LessOrEqual(t, float64(p95Loaded), 1.5*float64(p95Alone), "greedy pushed quiet's p95 up")
	require.Positive(t, greedyCodes[http.StatusTooManyRequests], "greedy's excess was refused with 429")
	require.Positive(t, greedyCodes[http.StatusOK])
}

func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*95/100)]
}
