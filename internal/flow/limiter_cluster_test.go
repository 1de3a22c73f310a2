package flow_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestLimiterAdoptLimit: a limit another node learned is applied at once
// to a limiter that has none (times the margin and the share), never
// above a configured one, and never over a limit this limiter observed
// itself more recently.
func TestLimiterAdoptLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		configured float64
		ownAt      time.Duration // own observation of limit 300 at t0+ownAt; < 0 none
		heardAt    time.Duration
		capacity   float64 // RPM capacity after adopting 600 at t0+heardAt (share 1/2, margin 1)
	}{
		{"unknown: learned at once", 0, -1, time.Second, 300},
		{"configured lower: kept", 120, -1, time.Second, 60},
		{"configured higher: the learned one", 6000, -1, time.Second, 300},
		{"own observation newer: kept", 0, 2 * time.Second, time.Second, 150},
		{"own observation older: adopted", 0, time.Second, 2 * time.Second, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, [flow.NumDims]float64{flow.Requests: tt.configured}, 10)
			l.Cluster().SetShare(0.5, t0)
			if tt.ownAt >= 0 {
				l.Observe(map[flow.Dim]flow.Observation{flow.Requests: {Limit: 300, Remaining: -1}}, flow.Mark{}, t0.Add(tt.ownAt))
			}
			now := t0.Add(3 * time.Second)
			l.Cluster().Adopt(flow.Requests, flow.Heard{Limit: 600, LimitAt: t0.Add(tt.heardAt)}, now)
			require.InDelta(t, tt.capacity, l.State(now)[flow.Requests].Capacity, 1e-9)
			require.Zero(t, l.Cluster().Heard()[flow.InputTokens], "nothing observed in that dimension")
		})
	}
}

// TestLimiterAdoptRemainingOnlyLowers: a shared remaining lowers the
// level to share·R plus the node's refill since the reported request was
// sent, less what the node admitted since; it never raises it, and an
// older report than one adopted is ignored.
func TestLimiterAdoptRemainingOnlyLowers(t *testing.T) {
	t.Parallel()
	// 600 RPM = 10/s, depth 10 s = 100; share 1/2: 5/s, depth 50.
	tests := []struct {
		name      string
		remaining float64
		admitted  float64 // by this node at t0+1s (after the report's request was sent at t0)
		level     float64 // at t0+4s
	}{
		// share·R = 10, refill since the request was sent (t0) 4 s × 5/s = 20.
		{"the provider has less: lowered", 20, 0, 30},
		{"own admissions since are taken off", 20, 5, 25},
		{"the provider has more: not raised", 200, 0, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 600}, 10)
			l.Cluster().SetShare(0.5, t0)
			if tt.admitted > 0 {
				w, err := l.Reserve(flow.Amount{flow.Requests: tt.admitted}, t0.Add(time.Second))
				require.NoError(t, err)
				require.Zero(t, w)
			}
			now := t0.Add(4 * time.Second)
			h := flow.Heard{Remaining: tt.remaining, SentAt: t0, At: t0.Add(2 * time.Second)}
			l.Cluster().Adopt(flow.Requests, h, now)
			require.InDelta(t, tt.level, l.State(now)[flow.Requests].Level, 1e-9)
			// The same report again, or an older one, changes nothing.
			l.Cluster().Adopt(flow.Requests, flow.Heard{Remaining: 0, SentAt: t0, At: t0.Add(time.Second)}, now)
			require.InDelta(t, tt.level, l.State(now)[flow.Requests].Level, 1e-9)
		})
	}
}

// TestLimiterAdoptKeepsClusterWithinReported is the property behind the
// rule: nodes with shares summing to at most 1, each admitting what its
// own buckets allow, all adopt the same report R (for a request sent,
// and charged, at SentAt); from then on, at any later instant, the
// levels of all nodes together (a level may be negative: the node owes
// what it admitted before it heard of the report) plus what they
// admitted since SentAt never exceed R plus the whole bucket's refill
// since SentAt: the cluster never counts on more room than the provider
// reported.
func TestLimiterAdoptKeepsClusterWithinReported(t *testing.T) {
	t.Parallel()
	for seed := range uint64(16) {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 7))
			const rpm, burst = 1200.0, 5.0 // 20/s, depth 100
			rate := rpm / 60
			n := 2 + rng.IntN(3)
			shares := make([]float64, n)
			var sum float64
			for i := range shares {
				shares[i] = 0.1 + rng.Float64()
				sum += shares[i]
			}
			ls := make([]*flow.Limiter, n)
			for i := range ls {
				shares[i] /= sum
				ls[i] = newLimiter(t, [flow.NumDims]float64{flow.Requests: rpm}, burst)
				ls[i].Cluster().SetShare(shares[i], t0)
			}
			step := 10 * time.Millisecond
			admitted := make([]float64, n) // since sent
			sent, at := t0.Add(time.Second), t0.Add(time.Second+300*time.Millisecond)
			remaining := rng.Float64() * 100 * rate / 20
			for k := range 600 {
				now := t0.Add(time.Duration(k) * step)
				if now.Equal(at.Add(200 * time.Millisecond)) {
					for _, l := range ls {
						l.Cluster().Adopt(flow.Requests, flow.Heard{Remaining: remaining, SentAt: sent, At: at}, now)
					}
				}
				for i, l := range ls {
					if rng.IntN(3) == 0 {
						continue
					}
					for rng.IntN(4) != 0 {
						w, err := l.Reserve(flow.Amount{flow.Requests: 1}, now)
						require.NoError(t, err)
						if w > 0 {
							break
						}
						if !now.Before(sent) {
							admitted[i]++
						}
					}
				}
				if now.Before(at.Add(200 * time.Millisecond)) {
					continue
				}
				var held float64
				for i, l := range ls {
					held += l.State(now)[flow.Requests].Level + admitted[i]
				}
				room := remaining + rate*now.Sub(sent).Seconds()
				require.LessOrEqual(t, held, room+1e-6, "at %v: levels + admitted since the report exceed R + refill", now.Sub(t0))
			}
		})
	}
}
