package flow_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestObserveComparesLikeForLike: the provider's remaining describes its
// bucket when it charged the request; Observe brings it forward by the
// refill since and what was taken since before clamping. (The old Observe
// clamped the level to the raw remaining: too optimistic when requests
// admitted since outran the refill, too pessimistic when the refill
// outran them.)
func TestObserveComparesLikeForLike(t *testing.T) {
	t.Parallel()
	// 60,000 input tokens a minute = 1,000/s, depth 10 s = 10,000.
	tests := []struct {
		name string
		// remaining is what the provider reports for the request sent at t0.
		remaining float64
		// later are reservations admitted at t0+1s, before the report is read.
		later float64
		// refunded is what was refunded at t0+1s (a reconciliation).
		refunded float64
		level    float64 // at t0+2s, after Observe
	}{
		// Our bucket: 10,000 − 5,000 (the request) = 5,000 at t0; +2,000
		// refill by t0+2s.
		{"agrees, refill since: nothing to clamp", 5000, 0, 0, 7000},
		{"agrees, requests since: nothing to clamp", 5000, 3000, 0, 4000},
		// A refund since the mark may predate the provider's report
		// (then it is in the remaining already): it is not credited.
		{"agrees, refund since: not credited", 5000, 0, 1500, 7000},
		{"the provider has less: clamp to its level now", 4000, 3000, 0, 3000},
		{"the provider has less, refill only", 4500, 0, 0, 6500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 60000}, 10)
			w, err := l.Reserve(flow.Amount{flow.InputTokens: 5000}, t0)
			require.NoError(t, err)
			require.Zero(t, w)
			mark := l.Mark(t0)
			t1 := t0.Add(time.Second)
			if tt.later > 0 {
				w, err = l.Reserve(flow.Amount{flow.InputTokens: tt.later}, t1)
				require.NoError(t, err)
				require.Zero(t, w)
			}
			l.Refund(flow.Amount{flow.InputTokens: tt.refunded}, t1)
			t2 := t0.Add(2 * time.Second)
			l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: 60000, Remaining: tt.remaining}}, mark, t2)
			require.InDelta(t, tt.level, l.State(t2)[flow.InputTokens].Level, 1e-6)
		})
	}
}

// TestObserveNeverOptimisticNeverPessimistic drives a Limiter and an exact
// model of the provider's bucket (same limit and depth, no margin) with
// random reservations, reconciliations and traffic the Limiter does not
// see (another client on the same key), and feeds back each request's
// report, read later and out of order. After every Observe the Limiter's
// level is at most the provider's true level plus what the other client
// took after the report was made (the Limiter cannot know that), and when
// there is no other client, Observe lowers the level by no more than what
// was refunded since the request was sent (which it does not credit).
func TestObserveNeverOptimisticNeverPessimistic(t *testing.T) {
	t.Parallel()
	const limit, burst = 60000.0, 60.0 // depth = capacity: the model's bucket is the provider's
	rate := limit / 60
	for seed := range uint64(200) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		others := seed%2 == 1
		l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: limit}, burst)
		// The provider's bucket, read lazily.
		pLevel, pAt := limit, t0
		provider := func(now time.Time) float64 {
			return math.Min(limit, pLevel+rate*now.Sub(pAt).Seconds())
		}
		charge := func(amount float64, now time.Time) {
			pLevel, pAt = provider(now)-amount, now
		}
		type report struct {
			mark      flow.Mark
			remaining float64
			otherAt   float64 // the other client's total when reported
			refundAt  float64 // our refunds' total when reported
		}
		var pending []report
		var otherTotal, refundTotal float64
		now := t0
		for range 300 {
			now = now.Add(time.Duration(rnd.IntN(500)) * time.Millisecond)
			switch op := rnd.IntN(4); {
			case op == 0 && others:
				x := float64(rnd.IntN(3000))
				charge(x, now)
				otherTotal += x
			case op <= 1:
				cost := float64(1 + rnd.IntN(4000))
				w, err := l.Reserve(flow.Amount{flow.InputTokens: cost}, now)
				require.NoError(t, err)
				if w > 0 {
					continue
				}
				charge(cost, now)
				pending = append(pending, report{mark: l.Mark(now), remaining: provider(now), otherAt: otherTotal, refundAt: refundTotal})
				if rnd.IntN(3) == 0 {
					// Reconciled: both sides refund the same share.
					back := math.Floor(cost * rnd.Float64())
					l.Refund(flow.Amount{flow.InputTokens: back}, now)
					charge(-back, now)
					refundTotal += back
				}
			default:
				if len(pending) == 0 {
					continue
				}
				i := rnd.IntN(len(pending))
				r := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				before := l.State(now)[flow.InputTokens].Level
				// Providers report no less than 0: what is hidden below
				// zero cannot be corrected.
				l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: limit, Remaining: math.Max(r.remaining, 0)}}, r.mark, now)
				after := l.State(now)[flow.InputTokens].Level
				require.LessOrEqual(t, after, provider(now)+(otherTotal-r.otherAt)+math.Max(-r.remaining, 0)+1e-6,
					"seed %d: after Observe the level %.1f is above the provider's %.1f", seed, after, provider(now))
				if !others {
					require.GreaterOrEqual(t, after, before-(refundTotal-r.refundAt)-1e-6,
						"seed %d: the buckets agree, Observe may only leave out the refunds since", seed)
				}
			}
		}
	}
}

// TestObserveLeavesRequestsSentWithinTheAllowanceToOurBuckets: B is sent
// 50 ms after A and reaches the provider first, so A's report counts
// both. Only what was reserved an allowance after A's send is surely not
// in the report; B is held in our own bucket already, so the clamp does
// not take it off a second time. (It did: the level fell by B's cost on
// every such report.)
func TestObserveLeavesRequestsSentWithinTheAllowanceToOurBuckets(t *testing.T) {
	t.Parallel()
	// 60,000 input tokens a minute = 1,000/s, 10 s deep: 10,000 at the
	// provider, 9,900 in ours (less the 100 ms allowance).
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.InputTokens: 60000},
		BurstSeconds: 10, SafetyMargin: 1, JitterAllowance: 100 * time.Millisecond}, t0)
	require.NoError(t, err)
	in := func(n float64) flow.Amount { return flow.Amount{flow.InputTokens: n} }
	_, err = l.Reserve(in(4000), t0) // A
	require.NoError(t, err)
	mark := l.Mark(t0)
	_, err = l.Reserve(in(3000), t0.Add(50*time.Millisecond)) // B
	require.NoError(t, err)
	// The provider: full (10,000), B charged at t0+60ms, A at t0+80ms;
	// it reports 3,000 after A (leaving out 80 ms of refill).
	remaining := 10000.0 - 3000 - 4000
	at := t0.Add(time.Second)
	before := l.State(at)[flow.InputTokens].Level
	l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: 60000, Remaining: remaining}}, mark, at)
	require.InDelta(t, before, l.State(at)[flow.InputTokens].Level, 1e-6, "nothing to clamp: the buckets agree")
}
