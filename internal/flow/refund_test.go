package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestRefundLeavesRoomForUnchargedReservations: a request answers and
// gives output back while another, just reserved, has not reached the
// provider yet. The provider's bucket is full then and drops part of the
// refund (a bucket holds no more than its depth); ours, debited at the
// reservation, would keep all of it and run ahead of the provider once
// the second request is charged. The credit is capped at the depth less
// what was reserved within the jitter allowance.
func TestRefundLeavesRoomForUnchargedReservations(t *testing.T) {
	t.Parallel()
	// 60,000 output tokens a minute = 1,000/s, 10 s deep: 10,000 at the
	// provider; ours 9,900 (less 100 ms of refill, the jitter allowance).
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.OutputTokens: 60000},
		BurstSeconds: 10, SafetyMargin: 1, JitterAllowance: 100 * time.Millisecond}, t0)
	require.NoError(t, err)
	out := func(n float64) flow.Amount { return flow.Amount{flow.OutputTokens: n} }
	reserve := func(n float64, at time.Time) {
		w, err := l.Reserve(out(n), at)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	// The provider's level, by hand: full at t0, A (6,000) charged at
	// t0, 4,000 + 2 s of refill = 6,000 at t0+2s. A answers at
	// t0+2.01s, using 1,000 of its 6,000: 6,010 + 5,000 = 11,010, kept
	// to 10,000. B (5,000), sent at t0+2s, arrives at t0+2.05s: 5,000.
	reserve(6000, t0)
	t2 := t0.Add(2 * time.Second)
	reserve(5000, t2)
	l.Reconcile(out(6000), out(1000), t2.Add(10*time.Millisecond))
	at := t2.Add(50 * time.Millisecond)
	provider := 5000.0
	require.LessOrEqual(t, l.State(at)[flow.OutputTokens].Level, provider,
		"the engine may not count on the refund the provider dropped")

	// Once B is past the allowance, a refund fills the bucket again.
	later := t2.Add(6 * time.Second)
	require.InDelta(t, 9900, l.State(later)[flow.OutputTokens].Level, 1e-6)
	reserve(3000, later)
	l.Refund(out(3000), later.Add(200*time.Millisecond))
	require.InDelta(t, 9900, l.State(later.Add(200 * time.Millisecond))[flow.OutputTokens].Level, 1e-6,
		"a refund of a request charged long ago is credited in full")
}

// TestUnreserveRestoresExactly: a reservation taken back at once (another
// bucket refused the request) leaves the level as it was, although it is
// within the jitter allowance.
func TestUnreserveRestoresExactly(t *testing.T) {
	t.Parallel()
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.OutputTokens: 60000},
		BurstSeconds: 10, SafetyMargin: 1, JitterAllowance: 100 * time.Millisecond}, t0)
	require.NoError(t, err)
	before := l.State(t0)[flow.OutputTokens].Level
	w, err := l.Reserve(flow.Amount{flow.OutputTokens: 4000}, t0)
	require.NoError(t, err)
	require.Zero(t, w)
	l.Unreserve(flow.Amount{flow.OutputTokens: 4000}, t0)
	require.InDelta(t, before, l.State(t0)[flow.OutputTokens].Level, 1e-9)
}

// TestRaiseSubtractsTheOldestUnchargedReservation: a report on request B
// is read while A, reserved at the same instant, was not charged yet (B
// got there first). Mark.From names A's reservation time: the raise must
// subtract A's debit too, not only what came after that instant.
func TestRaiseSubtractsTheOldestUnchargedReservation(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 60000}, 10) // 10,000 deep, no allowance
	in := func(n float64) flow.Amount { return flow.Amount{flow.InputTokens: n} }
	for _, n := range []float64{3000, 2000} { // A, then B
		w, err := l.Reserve(in(n), t0)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	// The engine's level was lowered (a report it could not match), then
	// B's report: the provider charged B only, 8,000 left.
	l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: 60000, Remaining: 0}}, flow.Mark{}, t0)
	mark := l.Mark(t0).From(t0)
	l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: 60000, Remaining: 8000}}, mark, t0)
	level := l.State(t0)[flow.InputTokens].Level
	require.LessOrEqual(t, level, 5000.0, "A (3,000) is still to be charged: at most 8,000 − 3,000")
	require.GreaterOrEqual(t, level, 3000.0, "B may be counted twice (it is in the report and reserved since the mark), no more")
}
