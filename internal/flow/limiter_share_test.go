package flow_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

func TestLimiterSetShareScalesRateAndDepth(t *testing.T) {
	t.Parallel()
	// 600 RPM = 10/s, depth 1 s = 10 requests; a quarter share: 2.5/s, depth 2.5.
	l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 600}, 1)
	one := flow.Amount{flow.Requests: 1}
	l.Cluster().SetShare(0.25, t0)
	require.InDelta(t, 0.25, l.Cluster().Share(), 1e-12)
	st := l.State(t0)[flow.Requests]
	require.InDelta(t, 150, st.Capacity, 1e-9)
	require.InDelta(t, 2.5, st.Depth, 1e-9)
	require.InDelta(t, 2.5, st.Level, 1e-9, "lowering drops the tokens above the new depth")
	for range 2 {
		w, err := l.Reserve(one, t0)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	w, err := l.Reserve(one, t0)
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, w, "half a token missing at 2.5/s")

	// Raising the share adds capacity that starts empty.
	l.Cluster().SetShare(1, t0)
	require.InDelta(t, 0.5, l.State(t0)[flow.Requests].Level, 1e-9)
	w, err = l.Reserve(one, t0)
	require.NoError(t, err)
	require.Equal(t, 50*time.Millisecond, w, "the new rate refills it: 0.5 token at 10/s")
	// SlowDown and share multiply.
	l.Cluster().SetShare(0.5, t0)
	l.SlowDown(0.5, time.Hour, t0)
	w, err = l.Reserve(flow.Amount{flow.Requests: 1}, t0)
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, w, "0.5 token at 10 × 0.5 × 0.5 = 2.5/s")

	// Out-of-range values are clamped.
	l.Cluster().SetShare(7, t0)
	require.InDelta(t, 1, l.Cluster().Share(), 1e-12)
	l.Cluster().SetShare(-1, t0)
	require.InDelta(t, flow.MinShare, l.Cluster().Share(), 1e-12)
}

func TestLimiterCreditAndBurstFill(t *testing.T) {
	t.Parallel()
	// 600 RPM = 10/s and 60k TPM = 1000/s, depth 2 s: 20 requests, 2000 tokens.
	l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 600, flow.Tokens: 60000}, 2)
	lvl, secs := l.Cluster().BurstFill(t0)
	require.InDelta(t, 1, lvl, 1e-12, "a fresh limiter is full")
	require.InDelta(t, 2, secs, 1e-12)
	require.Equal(t, [flow.NumDims]float64{flow.Requests: 20, flow.Tokens: 2000}, l.Cluster().BurstDepth())

	// Lowering drops the tokens above the new depth: the least fraction
	// over the dimensions.
	_, err := l.Reserve(flow.Amount{flow.Requests: 1, flow.Tokens: 600}, t0) // 19/20 and 1400/2000 left
	require.NoError(t, err)
	dropped := l.Cluster().SetShare(0.25, t0) // depth 5 and 500
	require.InDelta(t, (1400.0-500)/2000, dropped, 1e-12, "tokens: 0.45 of the burst; requests 0.7")
	require.Zero(t, l.Cluster().SetShare(0.5, t0), "raising drops nothing")
	lvl, _ = l.Cluster().BurstFill(t0)
	require.InDelta(t, 0.25, lvl, 1e-12, "5/20 and 500/2000")

	// A credit adds its fraction of the whole depth, capped at the node's.
	l.Cluster().Credit(0.1, t0)
	st := l.State(t0)
	require.InDelta(t, 7, st[flow.Requests].Level, 1e-9)
	require.InDelta(t, 700, st[flow.Tokens].Level, 1e-9)
	l.Cluster().Credit(1, t0)
	st = l.State(t0)
	require.InDelta(t, 10, st[flow.Requests].Level, 1e-9, "capped at share × depth")
	require.InDelta(t, 1000, st[flow.Tokens].Level, 1e-9)
	lvl, _ = l.Cluster().BurstFill(t0)
	require.InDelta(t, 0.5, lvl, 1e-12)
	l.Cluster().Credit(-1, t0)
	l.Cluster().Credit(math.NaN(), t0)
	require.InDelta(t, 10, l.State(t0)[flow.Requests].Level, 1e-9, "nothing for a bad fraction")

	// No limit known: nothing to fill or credit.
	u := newLimiter(t, [flow.NumDims]float64{}, 1)
	lvl, secs = u.Cluster().BurstFill(t0)
	require.Zero(t, lvl)
	require.Zero(t, secs)
	require.Zero(t, u.Cluster().SetShare(0.5, t0))
}

// TestLimiterSharesKeepClusterWindowBound drives three limiters with
// shares that change every sync (lowered first, raised out of what is
// left, never summing above 1) and greedy demand, on a fake timeline: over
// every window the three together never send more than rate·t + depth.
func TestLimiterSharesKeepClusterWindowBound(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 42))
			const rpm, burst = 1200.0, 2.0 // 20/s, depth 40
			rate, depth := rpm/60, rpm/60*burst
			ls := make([]*flow.Limiter, 3)
			shares := []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}
			for i := range ls {
				ls[i] = newLimiter(t, [flow.NumDims]float64{flow.Requests: rpm}, burst)
				ls[i].Cluster().SetShare(shares[i], t0)
			}
			step := 10 * time.Millisecond
			sync := 50 // steps (500 ms)
			var sends []time.Duration
			for k := range 3000 {
				now := t0.Add(time.Duration(k) * step)
				if k%sync == 0 && k > 0 {
					// New demand-weighted shares, lowered first.
					w := []float64{rng.Float64(), rng.Float64(), rng.Float64()}
					w[rng.IntN(3)] += 3 * rng.Float64()
					sum := w[0] + w[1] + w[2]
					next := make([]float64, 3)
					for i := range w {
						next[i] = w[i] / sum
					}
					for i := range ls {
						if next[i] < shares[i] {
							ls[i].Cluster().SetShare(next[i], now)
							shares[i] = next[i]
						}
					}
					for i := range ls {
						if next[i] > shares[i] {
							ls[i].Cluster().SetShare(next[i], now)
							shares[i] = next[i]
						}
					}
				}
				for i := range ls {
					if rng.IntN(4) == 0 {
						continue // idle now and then, so levels build up
					}
					for {
						w, err := ls[i].Reserve(flow.Amount{flow.Requests: 1}, now)
						require.NoError(t, err)
						if w > 0 {
							break
						}
						sends = append(sends, now.Sub(t0))
					}
				}
			}
			require.NotEmpty(t, sends)
			// Every window [sends[a], sends[b]] holds b−a+1 sends.
			for _, win := range []time.Duration{0, 100 * time.Millisecond, time.Second, 5 * time.Second} {
				a := 0
				for b := range sends {
					for sends[b]-sends[a] > win {
						a++
					}
					n := float64(b - a + 1)
					bound := rate*win.Seconds() + depth
					require.LessOrEqual(t, n, bound+1e-6, "window %v ending at %v", win, sends[b])
				}
			}
			// And the shares are used: over the run the cluster sends close
			// to the rate.
			total := float64(len(sends))
			require.Greater(t, total, 0.8*rate*30)
		})
	}
}

func TestAIMDSetShareCapsTheLimit(t *testing.T) {
	t.Parallel()
	a, err := flow.NewAIMD(1, 10, 0)
	require.NoError(t, err)
	a.SetShare(3)
	require.Equal(t, 3, a.Limit())
	a.OnOverload() // 10 → 9: still above the share
	require.Equal(t, 3, a.Limit())
	a.SetShare(0)
	require.Equal(t, 0, a.Limit(), "no slot: nothing new is admitted")
	a.SetShare(-1)
	require.Equal(t, 9, a.Limit())
	a.SetShare(20)
	require.Equal(t, 9, a.Limit(), "a share above the adaptive limit does not raise it")
}
