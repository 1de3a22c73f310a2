package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"

	"github.com/sluicehq/sluice/internal/clients"
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

// TestClientLimitFairness runs the gateway against the mock provider on a
// fake clock moved only while every goroutine rests (clock.Fake.StepUntil;
// the gateway and the mock are served in-process): quiet's p95 alone, then
// with greedy flooding at ten times its share, greedy held to its limit
// (requests_per_minute). Greedy's excess waits for greedy's own bucket or
// gets 429 (its 2 s deadline would pass); quiet's p95 must stay within
// 1.5× its unloaded p95. The figures are printed (BENCHMARKS.md records
// them):
//
//	go test -count=1 -run TestClientLimitFairness -v ./internal/server/
func TestClientLimitFairness(t *testing.T) {
	// Not parallel: clock.Settle reads the whole process's scheduler.
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: fairUpstreamRPM}, BurstSeconds: 1,
		TTFT: fairTTFT, OutputTokens: mock.OutputRange{Min: 3, Max: 3}, Seed: 7, Clock: fc})
	require.NoError(t, err)
	// A one-second burst: greedy is held to its rate from the start (the
	// default, a whole minute, would let it send a minute's worth at once).
	share := admit.LimitValues{RequestsPerMinute: fairShareRPM, BurstSeconds: 1}
	g, err := New(Config{Store: StoreNone,
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: "http://mock.invalid", APIKey: "sk-up",
			Limits: upcfg.Limits{RequestsPerMinute: fairUpstreamRPM}}},
		Clients: []clients.Config{{Name: "quiet", Key: "ck-quiet", Limits: admit.ClientLimits{LimitValues: share}},
			{Name: "greedy", Key: "ck-greedy", Limits: admit.ClientLimits{LimitValues: share}}}},
		WithLogger(discardLogger()), WithClock(fc), WithTransport(inProcess{m.Handler()}), WithoutListener())
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	// send sends one request at once and returns its status (0: cut off by
	// ctx) and latency.
	send := func(ctx context.Context, key string) (int, time.Duration) {
		req := httptest.NewRequestWithContext(ctx, "POST", "/claude/v1/messages", strings.NewReader(tenantJobBody))
		req.Header.Set("x-api-key", key)
		req.Header.Set("X-Sluice-Deadline", "2s")
		start := fc.Now()
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, req)
		if ctx.Err() != nil {
			return 0, 0
		}
		return rec.Code, fc.Now().Sub(start)
	}
	// run sends at rate per second for fairPhase, from the clock's now,
	// and returns a wait for the latencies of the 200s and the count per
	// status, once every request is answered.
	run := func(ctx context.Context, key string, rate int) func() ([]time.Duration, map[int]int) {
		var mu sync.Mutex
		var lat []time.Duration
		codes := map[int]int{}
		var wg sync.WaitGroup
		n := int(fairPhase.Seconds()) * rate
		every := time.Second / time.Duration(rate)
		start := fc.Now()
		for i := range n {
			wg.Go(func() {
				if clock.Sleep(ctx, fc, start.Add(time.Duration(i)*every).Sub(fc.Now())) != nil {
					return
				}
				code, d := send(ctx, key)
				mu.Lock()
				defer mu.Unlock()
				codes[code]++
				if code == http.StatusOK {
					lat = append(lat, d)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		return func() ([]time.Duration, map[int]int) {
			require.NoError(t, fc.StepUntil(func() bool {
				select {
				case <-done:
					return true
				default:
					return false
				}
			}, time.Minute))
			return lat, codes
		}
	}
	_, _ = run(t.Context(), "ck-quiet", fairQuietRate)() // as the measured phases will be: after one
	alone, codes := run(t.Context(), "ck-quiet", fairQuietRate)()
	require.Equal(t, map[int]int{200: len(alone)}, codes)

	ctx, cancel := context.WithCancel(t.Context())
	greedy := run(ctx, "ck-greedy", fairGreedyRate)
	loaded, codes := run(t.Context(), "ck-quiet", fairQuietRate)()
	cancel()
	_, greedyCodes := greedy()
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

// inProcess serves requests with h in the caller's goroutine, without a
// network, so every goroutine of a rig is running or blocked where the
// runtime sees it (clock.Settle).
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func p95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*95/100)]
}
