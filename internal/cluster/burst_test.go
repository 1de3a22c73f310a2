package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/flow"
)

// TestBurstPoolKeepsClusterWindowBound drives three limiters through the
// real protocol on a Memory backend and a fake clock: a quiet start of
// random length (the buckets fill while the pool holds the burst), staggered syncs
// every 100 ms with random demand and backlog (so shares move, lowered
// first, and drops come back to the pool), random idle spells (so levels
// build up and the pool decays), the burst pool's credits applied as
// granted, and greedy sends. Whatever the seed, the three together never
// send more than rate·t + depth over any window, and they do spend the
// burst: the first second carries more than the refill.
func TestBurstPoolKeepsClusterWindowBound(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			const rpm, burst = 1200.0, 2.0 // 20/s, depth 40
			rate, depth := rpm/60, rpm/60*burst
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			fc := clock.NewFake(t0)
			m := cluster.NewMemory(fc)
			ctx := context.Background()
			key := cluster.Key("up", "sk")
			type node struct {
				lim      *flow.Limiter
				share    float64
				starting bool
				returned float64
				backlog  float64
			}
			nodes := make([]*node, 3)
			for i := range nodes {
				lim, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.Requests: rpm},
					BurstSeconds: burst, SafetyMargin: 1}, t0)
				require.NoError(t, err)
				lim.Cluster().SetShare(0, t0) // a node starts holding nothing
				nodes[i] = &node{lim: lim, starting: true, backlog: 5}
			}
			sync := func(i int, now time.Time) {
				n := nodes[i]
				lvl, secs := n.lim.Cluster().BurstFill(now)
				r := cluster.Report{Key: key, Node: fmt.Sprint(i), Incarnation: fmt.Sprint("inc-", i), Share: n.share, Demand: rng.Float64() * 2,
					TTL: time.Second, Starting: n.starting, Backlog: n.backlog, Level: lvl, BurstSeconds: secs,
					Returned: min(n.returned, 1)}
				n.returned = 0
				g, err := m.Sync(ctx, r)
				require.NoError(t, err)
				n.returned += n.lim.Cluster().SetShare(g.Share, now)
				n.lim.Cluster().Credit(g.Credit, now)
				n.share, n.starting = g.Share, false
			}
			step := 10 * time.Millisecond
			var sends []time.Duration
			idle := make([]int, 3) // steps left idle
			// Odd seeds start idle for up to 1.5 s, so the buckets fill
			// while the pool holds the burst: the pool must have decayed
			// by what they hold.
			quiet := 0
			if seed%2 == 1 {
				quiet = rng.IntN(150)
			}
			for k := range 3000 {
				now := t0.Add(time.Duration(k) * step)
				fc.Advance(now.Sub(fc.Now()))
				for i, n := range nodes {
					if k%10 == (i*3)%10 { // every 100 ms, staggered
						if k < quiet || rng.IntN(5) == 0 {
							n.backlog = 0
						} else {
							n.backlog = 5 * rng.Float64()
						}
						sync(i, now)
					}
				}
				for i, n := range nodes {
					if k < quiet {
						continue
					}
					if idle[i] > 0 {
						idle[i]--
						continue
					}
					if rng.IntN(100) == 0 {
						idle[i] = rng.IntN(300) // up to 3 s idle
						continue
					}
					for {
						w, err := n.lim.Reserve(flow.Amount{flow.Requests: 1}, now)
						require.NoError(t, err)
						if w > 0 {
							break
						}
						sends = append(sends, now.Sub(t0))
					}
				}
			}
			require.NotEmpty(t, sends)
			for _, win := range []time.Duration{0, 100 * time.Millisecond, time.Second, 5 * time.Second} {
				a := 0
				for b := range sends {
					for sends[b]-sends[a] > win {
						a++
					}
					n := float64(b - a + 1)
					require.LessOrEqual(t, n, rate*win.Seconds()+depth+1e-6, "window %v ending at %v", win, sends[b])
				}
			}
			firstSecond := 0
			for _, s := range sends {
				if s-sends[0] <= time.Second {
					firstSecond++
				}
			}
			if quiet == 0 {
				// Buckets that start empty send at most the refill (20) in
				// their first second; with the pool, the burst on top.
				require.Greater(t, float64(firstSecond), rate+depth/4, "the burst is spent at the start")
			}
			require.Greater(t, float64(len(sends)), 0.6*rate*30, "the shares are used")
		})
	}
}
