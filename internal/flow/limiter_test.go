package flow_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/flow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLimiter(t testing.TB, limits [flow.NumDims]float64, burst float64) *flow.Limiter {
	t.Helper()
	l, err := flow.NewLimiter(flow.LimiterConfig{Limits: limits, BurstSeconds: burst, SafetyMargin: 1, JitterAllowance: -1}, t0)
	require.NoError(t, err)
	return l
}

func TestLimiterBucketMath(t *testing.T) {
	t.Parallel()
	// 600 RPM = 10/s, depth 1 s = 10 requests.
	l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 600}, 1)
	one := flow.Amount{flow.Requests: 1}
	for i := range 10 {
		w, err := l.Reserve(one, t0)
		require.NoError(t, err)
		require.Zero(t, w, "request %d fits the depth", i)
	}
	w, err := l.Reserve(one, t0)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, w, "one request refills in 1/10 s")
	w, err = l.Reserve(one, t0.Add(100*time.Millisecond))
	require.NoError(t, err)
	require.Zero(t, w)

	// After a long idle the bucket holds its depth, not a minute's worth.
	later := t0.Add(time.Hour)
	require.InDelta(t, 10, l.State(later)[flow.Requests].Level, 1e-9)

	// Bigger than the depth but within the capacity: waits to accumulate.
	big := flow.Amount{flow.Requests: 30}
	w, err = l.TimeUntil(big, later)
	require.NoError(t, err)
	require.Zero(t, w, "an idle bucket has accumulated up to the capacity for a big request")
	_, err = l.Reserve(big, later)
	require.NoError(t, err)
	w, err = l.TimeUntil(big, later)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, w)

	_, err = l.TimeUntil(flow.Amount{flow.Requests: 601}, later)
	require.ErrorIs(t, err, flow.ErrTooLarge)

	// Unknown dimensions never block.
	w, err = l.TimeUntil(flow.Amount{flow.Tokens: 1e12}, later.Add(3*time.Second))
	require.NoError(t, err)
	require.Zero(t, w)
}

func TestLimiterReconcileRefund(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		reserved  flow.Amount
		actual    flow.Amount
		wantLevel float64
	}{
		{"refund unused output", flow.NewAmount(100, 1000), flow.NewAmount(100, 10), 6000 - 110},
		{"debit beyond estimate goes negative", flow.NewAmount(100, 1000), flow.NewAmount(3000, 4000), 6000 - 7000},
		{"exact", flow.NewAmount(100, 1000), flow.NewAmount(100, 1000), 6000 - 1100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLimiter(t, [flow.NumDims]float64{flow.Tokens: 60000}, 6) // depth 6000
			w, err := l.Reserve(tt.reserved, t0)
			require.NoError(t, err)
			require.Zero(t, w)
			l.Reconcile(tt.reserved, tt.actual, t0)
			require.InDelta(t, tt.wantLevel, l.State(t0)[flow.Tokens].Level, 1e-9)
		})
	}
	l := newLimiter(t, [flow.NumDims]float64{flow.Tokens: 60000}, 6)
	_, err := l.Reserve(flow.NewAmount(0, 5000), t0)
	require.NoError(t, err)
	l.Refund(flow.NewAmount(0, 5000), t0)
	require.InDelta(t, 6000, l.State(t0)[flow.Tokens].Level, 1e-9)
}

func TestLimiterObserve(t *testing.T) {
	t.Parallel()
	// Nothing configured: limits are learned, times the margin.
	l, err := flow.NewLimiter(flow.LimiterConfig{SafetyMargin: 0.9, BurstSeconds: 6, JitterAllowance: -1}, t0)
	require.NoError(t, err)
	l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: 10000, Remaining: 200}}, flow.Mark{}, t0)
	s := l.State(t0)[flow.InputTokens]
	require.InDelta(t, 9000, s.Capacity, 1e-9)
	require.InDelta(t, 200, s.Level, 1e-9, "never more room than the provider reports")

	// Configured higher than the provider says: the provider wins.
	l = newLimiter(t, [flow.NumDims]float64{flow.Requests: 1000}, 6)
	l.Observe(map[flow.Dim]flow.Observation{flow.Requests: {Limit: 50, Remaining: -1}}, flow.Mark{}, t0)
	require.InDelta(t, 50, l.State(t0)[flow.Requests].Capacity, 1e-9)

	// More room reported than the depth: the provider's bucket is at
	// least that deep, so ours deepens to it at once.
	l = newLimiter(t, [flow.NumDims]float64{flow.Tokens: 60000}, 1) // depth 1000
	l.Observe(map[flow.Dim]flow.Observation{flow.Tokens: {Limit: 60000, Remaining: 50000}}, flow.Mark{}, t0)
	require.InDelta(t, 50000, l.State(t0)[flow.Tokens].Depth, 1e-9, "as deep as what is reported")
	l.Pause(t0.Add(time.Second), t0)
	require.InDelta(t, 1000, l.State(t0)[flow.Tokens].Depth, 1e-9, "a RATE pause makes it shallow again")
}

func TestLimiterPause(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, [flow.NumDims]float64{}, 5)
	l.Pause(t0.Add(3*time.Second), t0)
	l.Pause(t0.Add(time.Second), t0) // earlier: ignored
	w, err := l.Reserve(flow.NewAmount(1, 1), t0)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, w)
	require.Equal(t, 3*time.Second, l.WaitFor(flow.NewAmount(1, 1), t0))
	w, err = l.Reserve(flow.NewAmount(1, 1), t0.Add(3*time.Second))
	require.NoError(t, err)
	require.Zero(t, w)
}

func TestLimiterConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  flow.LimiterConfig
		want string
	}{
		{flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.Tokens: -1}, BurstSeconds: 5, SafetyMargin: 1}, "Limits[tokens]"},
		{flow.LimiterConfig{BurstSeconds: 61, SafetyMargin: 1}, "BurstSeconds"},
		{flow.LimiterConfig{SafetyMargin: 1}, "BurstSeconds"}, // no defaults here: upstream.Config has them
		{flow.LimiterConfig{BurstSeconds: 5, SafetyMargin: 2}, "SafetyMargin"},
		{flow.LimiterConfig{BurstSeconds: 5}, "SafetyMargin"},
		{flow.LimiterConfig{BurstSeconds: 5, SafetyMargin: 1, JitterAllowance: 2 * time.Minute}, "JitterAllowance"},
	}
	for _, tt := range tests {
		_, err := flow.NewLimiter(tt.cfg, t0)
		require.ErrorContains(t, err, tt.want)
	}
}

// TestLimiterNeverExceedsQuota drives random workloads through the limiter
// (admitting only what Reserve accepts, reconciling with random actual
// usage) and checks, in every dimension and over every window, that what
// was admitted stays within the token-bucket envelope of the limiter's own
// accounting: sum over [s, t] ≤ max(depth, largest cost) + rate·(t−s) +
// what reconciliation refunded in between.
func TestLimiterNeverExceedsQuota(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		rnd := rand.New(rand.NewPCG(seed, 99))
		limits := [flow.NumDims]float64{
			flow.Requests:     float64(10 + rnd.IntN(500)),
			flow.InputTokens:  float64(10000 + rnd.IntN(100000)),
			flow.OutputTokens: float64(2000 + rnd.IntN(20000)),
			flow.Tokens:       0,
		}
		if rnd.IntN(2) == 0 {
			limits[flow.Tokens] = limits[flow.InputTokens] + limits[flow.OutputTokens]/2
		}
		burst := 1 + rnd.Float64()*10
		l := newLimiter(t, limits, burst)
		type event struct {
			at   time.Time
			cost flow.Amount
		}
		var admitted []event
		var refunds []event
		now := t0
		for range 1500 {
			now = now.Add(time.Duration(rnd.IntN(300)) * time.Millisecond)
			cost := flow.NewAmount(int64(1+rnd.IntN(int(limits[flow.InputTokens]/20))), int64(1+rnd.IntN(int(limits[flow.OutputTokens]/20))))
			w, err := l.Reserve(cost, now)
			require.NoError(t, err)
			if w > 0 {
				continue
			}
			admitted = append(admitted, event{now, cost})
			// Actual usage: never above the reservation here, so refunds only.
			actual := cost
			actual[flow.OutputTokens] = math.Floor(cost[flow.OutputTokens] * rnd.Float64())
			actual[flow.Tokens] = actual[flow.InputTokens] + actual[flow.OutputTokens]
			l.Reconcile(cost, actual, now)
			refunds = append(refunds, event{now, cost.Sub(actual)})
		}
		require.Greater(t, len(admitted), 100, "seed %d: the workload must exercise the limiter", seed)
		for d := range flow.NumDims {
			if limits[d] == 0 {
				continue
			}
			rate := limits[d] / 60
			var maxCost float64
			for _, e := range admitted {
				maxCost = math.Max(maxCost, e.cost[d])
			}
			depth := math.Max(limits[d]/60*burst, maxCost)
			for i := range admitted {
				var sum, refunded float64
				for j := i; j < len(admitted); j++ {
					sum += admitted[j].cost[d]
					if j > i {
						refunded += refunds[j-1].cost[d] // reconciled before j was admitted
					}
					span := admitted[j].at.Sub(admitted[i].at).Seconds()
					if bound := depth + rate*span + refunded + 1e-6; sum > bound {
						t.Fatalf("seed %d dim %s window [%d,%d]: admitted %.0f > envelope %.0f", seed, flow.Dim(d), i, j, sum, bound)
					}
				}
			}
		}
	}
}

func BenchmarkLimiterReserve(b *testing.B) {
	l := newLimiter(b, [flow.NumDims]float64{flow.Requests: 1e9, flow.InputTokens: 1e12, flow.OutputTokens: 1e12, flow.Tokens: 1e12}, 60)
	cost := flow.NewAmount(1000, 500)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if _, err := l.Reserve(cost, now); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLimiterHeadroom(t *testing.T) {
	t.Parallel()
	// 6,000 output tokens per minute = 100/s, depth 10 s = 1,000 tokens.
	l := newLimiter(t, [flow.NumDims]float64{flow.OutputTokens: 6000}, 10)
	cost := flow.Amount{flow.OutputTokens: 200}
	keep := flow.Keep{Share: 0.1} // leave 100 tokens
	for i := range 4 {
		w, err := l.ReserveKeeping(cost, keep, t0)
		require.NoError(t, err)
		require.Zero(t, w, "request %d leaves the headroom", i)
	}
	// 200 left: a lower class must leave 100, so it waits for 100 more.
	w, err := l.ReserveKeeping(cost, keep, t0)
	require.NoError(t, err)
	require.Equal(t, time.Second, w)
	// The urgent class may use the headroom at once.
	w, err = l.ReserveKeeping(cost, flow.Keep{}, t0)
	require.NoError(t, err)
	require.Zero(t, w)
	// Empty now; with the headroom the lower class waits 3 s, not 2 s.
	w, err = l.ReserveKeeping(cost, keep, t0)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, w)

	// A request too big to leave the headroom needs only a full bucket.
	big := flow.Amount{flow.OutputTokens: 950}
	w, err = l.ReserveKeeping(big, keep, t0.Add(10*time.Second))
	require.NoError(t, err)
	require.Zero(t, w)
}

func TestLimiterSlowDownRampsBack(t *testing.T) {
	t.Parallel()
	// 600 RPM = 10/s, depth 1 s = 10 requests.
	l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 600}, 1)
	one := flow.Amount{flow.Requests: 1}
	for range 10 {
		w, err := l.Reserve(one, t0)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	w, err := l.TimeUntil(one, t0)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, w, "full rate: 10/s")

	l.SlowDown(0.5, 10*time.Minute, t0)
	require.InDelta(t, 0.5, l.Scale(t0), 1e-9)
	w, err = l.TimeUntil(one, t0)
	require.NoError(t, err)
	require.Equal(t, 200*time.Millisecond, w, "half rate: 5/s")

	// Halfway through the ramp the rate is 75%.
	half := t0.Add(5 * time.Minute)
	require.InDelta(t, 0.75, l.Scale(half), 1e-9)
	// A second cut compounds from there, never below the floor.
	l.SlowDown(0.5, 10*time.Minute, half)
	require.InDelta(t, 0.375, l.Scale(half), 1e-9)
	for range 10 {
		l.SlowDown(0.1, 10*time.Minute, half)
	}
	require.InDelta(t, flow.SlowDownFloor, l.Scale(half), 1e-9)

	// After the ramp the full rate is back and the cut is gone.
	later := half.Add(10 * time.Minute)
	require.InDelta(t, 1.0, l.Scale(later), 1e-9)
	st := l.State(later)
	require.InDelta(t, 10.0, st[flow.Requests].Level, 1e-6, "refilled to the depth")
	for range 10 {
		_, err := l.Reserve(one, later)
		require.NoError(t, err)
	}
	w, err = l.TimeUntil(one, later)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, w)
}

// TestLimiterJitterAllowance: the depth stays the allowance's refill below
// the burst it comes from, so a request stream admitted by the limiter and
// then delayed unevenly (by up to the allowance) still fits a provider
// bucket as deep as that burst.
func TestLimiterJitterAllowance(t *testing.T) {
	t.Parallel()
	cfg := flow.LimiterConfig{Limits: [flow.NumDims]float64{flow.Requests: 1200}, BurstSeconds: 1, SafetyMargin: 1,
		JitterAllowance: 100 * time.Millisecond}
	l, err := flow.NewLimiter(cfg, t0)
	require.NoError(t, err)
	require.InDelta(t, 18, l.State(t0)[flow.Requests].Depth, 1e-9, "20 a second deep, less 100 ms of refill")

	// Deepening from the provider's remaining keeps the same allowance.
	l.Observe(map[flow.Dim]flow.Observation{flow.Requests: {Limit: 1200, Remaining: 20}}, flow.Mark{}, t0)
	require.InDelta(t, 18, l.State(t0)[flow.Requests].Depth, 1e-9, "20 remaining leave no room to deepen")
	l.Observe(map[flow.Dim]flow.Observation{flow.Requests: {Limit: 1200, Remaining: 30}}, flow.Mark{}, t0)
	require.InDelta(t, 28, l.State(t0)[flow.Requests].Depth, 1e-9)

	// Never below half: a 50 ms burst keeps 0.5 request, not a negative one.
	cfg.BurstSeconds = 0.05
	l, err = flow.NewLimiter(cfg, t0)
	require.NoError(t, err)
	require.InDelta(t, 0.5, l.State(t0)[flow.Requests].Depth, 1e-9)

	// Admit 200 requests as fast as the limiter allows, delay the opening
	// burst by the allowance (the worst case: the provider's bucket sits
	// full meanwhile while later requests arrive on time), and replay the
	// arrivals against a provider bucket of 20 requests refilling at 20/s:
	// none is refused. Without the allowance one would be.
	cfg.BurstSeconds = 1
	l, err = flow.NewLimiter(cfg, t0)
	require.NoError(t, err)
	now := t0
	var arrivals []time.Time
	for range 200 {
		for {
			w, err := l.Reserve(flow.NewAmount(1, 0), now)
			require.NoError(t, err)
			if w == 0 {
				break
			}
			now = now.Add(w)
		}
		delay := time.Duration(0)
		if now.Equal(t0) {
			delay = cfg.JitterAllowance
		}
		arrivals = append(arrivals, now.Add(delay))
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	level, last := 20.0, t0
	for i, at := range arrivals {
		level = math.Min(20, level+at.Sub(last).Seconds()*20)
		last = at
		require.GreaterOrEqual(t, level, 1-1e-9, "arrival %d at %v found the provider's bucket empty", i, at.Sub(t0))
		level--
	}
}

// TestLimiterWithdraw: a reservation cut before its request is sent (a
// ticket whose request costs less than it reserved) is, for Observe, the
// smaller reservation it became: a report made before it was sent is
// brought forward with only what will be charged taken off, as for a
// Limiter that reserved the smaller amount in the first place. A Refund
// of the same surplus (a credit that may never have been charged) keeps
// the whole debit counted and the clamp takes the level far lower.
func TestLimiterWithdraw(t *testing.T) {
	t.Parallel()
	const depth = 6000.0 // 6,000 a minute, 60 s deep: 100 a second
	run := func(reserve float64, back func(l *flow.Limiter, at, now time.Time)) float64 {
		l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: depth}, 60)
		// A request sent at t0, whose answer reports the provider's
		// bucket as of its charge.
		_, err := l.Reserve(flow.Amount{flow.InputTokens: 100}, t0)
		require.NoError(t, err)
		mark := l.Mark(t0)
		// A ticket reserved after it, its real request known (and sent)
		// 100 ms later.
		at := t0.Add(100 * time.Millisecond)
		_, err = l.Reserve(flow.Amount{flow.InputTokens: reserve}, at)
		require.NoError(t, err)
		if back != nil {
			back(l, at, at.Add(100*time.Millisecond))
		}
		now := t0.Add(500 * time.Millisecond)
		l.Observe(map[flow.Dim]flow.Observation{flow.InputTokens: {Limit: depth, Remaining: depth - 100}}, mark, now)
		return l.State(now)[flow.InputTokens].Level
	}
	want := run(500, nil)
	require.InDelta(t, depth-100-500+50, want, 1e-6, "the provider's 5,900 brought forward: the refill since, less the 500 the ticket will be charged")
	withdrawn := run(3000, func(l *flow.Limiter, at, now time.Time) {
		l.Withdraw(flow.Amount{flow.InputTokens: 2500}, at, now, now)
	})
	require.InDelta(t, want, withdrawn, 1e-6, "as if it had reserved 500")
	refunded := run(3000, func(l *flow.Limiter, _, now time.Time) {
		l.Refund(flow.Amount{flow.InputTokens: 2500}, now)
	})
	require.InDelta(t, want-2500, refunded, 1e-6, "a refund keeps the whole debit counted")

	// Withdrawing nothing, or a negative part, changes nothing.
	none := run(500, func(l *flow.Limiter, at, now time.Time) {
		l.Withdraw(flow.Amount{flow.InputTokens: -100}, at, now, now)
	})
	require.InDelta(t, want, none, 1e-6)
}
