package flow_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// TestBurstRoomLearnsTheBacklogOfABurst: the room is the backlog a burst
// leaves when served at the refill rate, per dimension, in seconds; it is
// kept for the lower classes only, for every class more urgent together.
func TestBurstRoomLearnsTheBacklogOfABurst(t *testing.T) {
	t.Parallel()
	rate := flow.Amount{flow.Requests: 2, flow.InputTokens: 1000} // per second; output not limited
	cost := flow.NewAmount(500, 100)
	for _, tc := range []struct {
		name    string
		arrive  func(r *flow.BurstRoom)
		class   llm.Priority
		at      time.Duration
		wantReq float64 // seconds of the requests bucket kept
		wantIn  float64 // seconds of the input bucket kept
	}{
		{"nothing seen keeps nothing", func(*flow.BurstRoom) {}, llm.Low, 0, 0, 0},
		{"critical keeps nothing", func(r *flow.BurstRoom) { burst(r, llm.Critical, cost, rate, 0, 4) }, llm.Critical, 0, 0, 0},
		{"four at once: 2 s of requests, 2 s of input", func(r *flow.BurstRoom) { burst(r, llm.Critical, cost, rate, 0, 4) }, llm.High, 0, 2, 2},
		{"the room outlives the backlog", func(r *flow.BurstRoom) { burst(r, llm.Critical, cost, rate, 0, 4) }, llm.Low, time.Minute, 2, 2},
		{"spread out, the backlog drains between arrivals", func(r *flow.BurstRoom) {
			for i := range 4 {
				r.Arrive(llm.Critical, cost, rate, t0.Add(time.Duration(i)*time.Second))
			}
		}, llm.Low, 10 * time.Second, 0.5, 0.5},
		{"high counts for normal and low, not for high", func(r *flow.BurstRoom) { burst(r, llm.High, cost, rate, 0, 4) }, llm.High, 0, 0, 0},
		{"critical and high together for low", func(r *flow.BurstRoom) {
			burst(r, llm.Critical, cost, rate, 0, 2)
			burst(r, llm.High, cost, rate, 0, 2)
		}, llm.Low, 0, 2, 2},
		{"critical alone for high", func(r *flow.BurstRoom) {
			burst(r, llm.Critical, cost, rate, 0, 2)
			burst(r, llm.High, cost, rate, 0, 2)
		}, llm.High, 0, 1, 1},
		{"low's own arrivals keep nothing", func(r *flow.BurstRoom) { burst(r, llm.Low, cost, rate, 0, 100) }, llm.Low, 0, 0, 0},
		{"an invalid class is ignored", func(r *flow.BurstRoom) { burst(r, llm.Priority(9), cost, rate, 0, 4) }, llm.Low, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := flow.NewBurstRoom(10 * time.Minute)
			tc.arrive(r)
			s := r.Seconds(tc.class, t0.Add(tc.at))
			require.InDelta(t, tc.wantReq, s[flow.Requests], 1e-9)
			require.InDelta(t, tc.wantIn, s[flow.InputTokens], 1e-9)
			require.Zero(t, s[flow.OutputTokens], "a dimension not limited keeps no room")
		})
	}
}

// TestBurstRoomHoldsThenDecays: the room a burst set holds for the
// memory, so a burst that recurs within it finds all it needs, then
// decays with the memory as time constant; a burst as large sets it
// again, a smaller one lets it decay down to its own size.
func TestBurstRoomHoldsThenDecays(t *testing.T) {
	t.Parallel()
	rate := flow.Amount{flow.Requests: 1}
	one := flow.Amount{flow.Requests: 1}
	r := flow.NewBurstRoom(time.Minute)
	burst(r, llm.Critical, one, rate, 0, 10)
	low := func(at time.Duration) float64 { return r.Seconds(llm.Low, t0.Add(at))[flow.Requests] }
	require.InDelta(t, 10, low(59*time.Second), 1e-9, "held for the memory")
	require.InDelta(t, 10*math.Exp(-1), low(2*time.Minute), 1e-9, "then decays")
	burst(r, llm.Critical, one, rate, 2*time.Minute, 10)
	require.InDelta(t, 10, low(2*time.Minute+59*time.Second), 1e-9, "a burst as large sets it again")
	burst(r, llm.Critical, one, rate, 3*time.Minute+30*time.Second, 5)
	require.InDelta(t, 10*math.Exp(-0.5), low(3*time.Minute+30*time.Second), 1e-9, "a smaller one does not")
	require.InDelta(t, 5, low(3*time.Minute+30*time.Second+time.Minute), 1e-9, "once decayed below it, the smaller burst is remembered")
	require.Less(t, low(15*time.Minute), 0.01, "quiet for long: the lower classes get the bucket back")

	none := flow.NewBurstRoom(0)
	burst(none, llm.Critical, one, rate, 0, 10)
	require.InDelta(t, 10, none.Seconds(llm.Low, t0)[flow.Requests], 1e-9, "no memory: the backlog alone")
	require.InDelta(t, 6, none.Seconds(llm.Low, t0.Add(4*time.Second))[flow.Requests], 1e-9)
	require.Zero(t, none.Seconds(llm.Low, t0.Add(time.Minute))[flow.Requests])
}

// TestBurstRoomPrimed: before the urgent classes are seen, a primed room
// keeps PrimeSeconds for the primed class only, in every dimension, held
// for the memory and then decaying like a burst; bursts seen are
// remembered beside it; without memory, or for critical, priming does
// nothing.
func TestBurstRoomPrimed(t *testing.T) {
	t.Parallel()
	r := flow.NewBurstRoom(time.Minute)
	r.Prime(llm.Low, flow.PrimeSeconds, t0)
	s := r.Seconds(llm.Low, t0.Add(59*time.Second))
	for d := range flow.NumDims {
		require.InDelta(t, flow.PrimeSeconds, s[d], 1e-9, "dim %d held for the memory", d)
	}
	for _, c := range []llm.Priority{llm.Critical, llm.High, llm.Normal} {
		require.Zero(t, r.Seconds(c, t0)[flow.Requests], "%v keeps nothing primed", c)
	}
	low := func(at time.Duration) float64 { return r.Seconds(llm.Low, t0.Add(at))[flow.Requests] }
	require.InDelta(t, flow.PrimeSeconds*math.Exp(-1), low(2*time.Minute), 1e-9, "then decays")
	burst(r, llm.Critical, flow.Amount{flow.Requests: 1}, flow.Amount{flow.Requests: 1}, 9*time.Minute, 4)
	require.InDelta(t, 4, low(9*time.Minute+30*time.Second), 0.01, "a burst seen once the prime decayed is the room")

	none := flow.NewBurstRoom(0)
	none.Prime(llm.Low, flow.PrimeSeconds, t0)
	require.Zero(t, none.Seconds(llm.Low, t0)[flow.Requests], "no memory: nothing primed")
	crit := flow.NewBurstRoom(time.Minute)
	crit.Prime(llm.Critical, flow.PrimeSeconds, t0)
	require.Zero(t, crit.Seconds(llm.High, t0)[flow.Requests])
}

// burst records n arrivals of class c at t0+at.
func burst(r *flow.BurstRoom, c llm.Priority, cost, rate flow.Amount, at time.Duration, n int) {
	for range n {
		r.Arrive(c, cost, rate, t0.Add(at))
	}
}

// TestLimiterKeepsTheLearnedRoom: a Keep's learned seconds are held in
// tokens at the bucket's refill rate, capped at its share of the depth,
// beside the configured headroom (the larger of the two applies).
func TestLimiterKeepsTheLearnedRoom(t *testing.T) {
	t.Parallel()
	// 6,000 input tokens a minute = 100/s, depth 10 s = 1,000 tokens.
	for _, tc := range []struct {
		name string
		keep flow.Keep
		fits int // requests of 100 tokens admitted from a full bucket
	}{
		{"none", flow.Keep{}, 10},
		{"2 s learned: 200 tokens kept", flow.Keep{Seconds: [flow.NumDims]float64{flow.InputTokens: 2}, Cap: 0.5}, 8},
		{"8 s learned, capped at half the depth", flow.Keep{Seconds: [flow.NumDims]float64{flow.InputTokens: 8}, Cap: 0.5}, 5},
		{"no cap: no learned room", flow.Keep{Seconds: [flow.NumDims]float64{flow.InputTokens: 8}}, 10},
		{"the headroom when larger", flow.Keep{Share: 0.3, Seconds: [flow.NumDims]float64{flow.InputTokens: 2}, Cap: 0.5}, 7},
		{"another dimension's room keeps nothing here", flow.Keep{Seconds: [flow.NumDims]float64{flow.OutputTokens: 8}, Cap: 0.5}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 6000}, 10)
			cost := flow.Amount{flow.InputTokens: 100}
			n := 0
			for ; n < 20; n++ {
				w, err := l.ReserveKeeping(cost, tc.keep, t0)
				require.NoError(t, err)
				if w > 0 {
					break
				}
			}
			require.Equal(t, tc.fits, n)
			w, _, err := l.Room(cost, tc.keep, t0)
			require.NoError(t, err)
			require.Positive(t, w, "Room agrees with ReserveKeeping")
		})
	}
}

// TestBurstRoomSettleCountsWhatWasUsed: steady arrivals whose estimate is
// ten times what they use and whose answers settle 200 ms later. Counted
// at the estimate, the backlog grows without end; settled, it stays at
// what the requests in flight reserve. A request that used more than its
// estimate adds the difference, and a burst is still remembered at its
// reservations.
func TestBurstRoomSettleCountsWhatWasUsed(t *testing.T) {
	t.Parallel()
	rate := flow.Amount{0, 0, 100, 0} // output tokens a second
	est, used := flow.Amount{0, 0, 100, 0}, flow.Amount{0, 0, 10, 0}
	run := func(settle bool) float64 {
		r := flow.NewBurstRoom(time.Minute)
		now := time.Unix(0, 0)
		var worst float64
		for i := range 90 { // 1.5 a second for a minute: 150 reserved a second
			at := now.Add(time.Duration(i) * 2 * time.Second / 3)
			r.Arrive(llm.Critical, est, rate, at)
			if settle {
				r.Settle(llm.Critical, est.Sub(used), rate, at.Add(200*time.Millisecond))
			}
			worst = max(worst, r.Seconds(llm.High, at.Add(200*time.Millisecond))[flow.OutputTokens])
		}
		return worst
	}
	require.Greater(t, run(false), 25.0, "counted at the estimate, the backlog grows 0.5 s a second")
	require.InDelta(t, 1.0, run(true), 1e-9, "settled: one request's reservation, the room its arrival needs")

	r := flow.NewBurstRoom(time.Minute)
	now := time.Unix(0, 0)
	for range 5 {
		r.Arrive(llm.Critical, est, rate, now) // a burst of five at once: 5 s
	}
	for range 5 {
		r.Settle(llm.Critical, est.Sub(used), rate, now.Add(time.Second))
	}
	require.InDelta(t, 5.0, r.Seconds(llm.High, now.Add(2*time.Second))[flow.OutputTokens], 1e-9,
		"the burst's peak stays: it was admitted at its reservations")
	r.Settle(llm.Critical, flow.Amount{0, 0, -800, 0}, rate, now.Add(2*time.Second)) // 800 more than estimated
	require.InDelta(t, 8.0, r.Seconds(llm.High, now.Add(2*time.Second))[flow.OutputTokens], 1e-9,
		"a request that used more than its estimate adds the difference")
}
