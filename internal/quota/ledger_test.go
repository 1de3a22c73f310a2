package quota_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

var t0 = time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC)

func exceeded(t *testing.T, err error) *quota.ExceededError {
	t.Helper()
	e, ok := errors.AsType[*quota.ExceededError](err)
	require.True(t, ok, "want an ExceededError, got %v", err)
	return e
}

func usd(v float64) pricing.Amount { return pricing.FromDollars(v) }

func TestReserveRefusesPastTheLimit(t *testing.T) {
	t.Parallel()
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(1)}, t0)
	h1, err := l.Reserve("a", usd(0.6), t0)
	require.NoError(t, err)
	_, err = l.Reserve("a", usd(0.5), t0)
	e := exceeded(t, err)
	require.Equal(t, quota.Day, e.Window)
	require.Equal(t, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), e.ResetsAt)
	require.False(t, e.TooLarge)
	// It would fit once the 0.6 in flight settles: pending, not exhausted.
	require.True(t, e.Pending)
	require.False(t, e.First)

	// Settled below its reservation: the difference is free again.
	l.Settle(h1, usd(0.2), t0)
	h2, err := l.Reserve("a", usd(0.5), t0)
	require.NoError(t, err)
	acc := l.Account("a", t0)
	require.Equal(t, usd(0.2), acc.Day.Spent)
	require.Equal(t, usd(0.5), acc.Day.Reserved)
	require.Equal(t, usd(0.3), acc.Day.Remaining())
	// A refund gives it all back.
	l.Settle(h2, 0, t0)
	require.Equal(t, usd(0.8), l.Account("a", t0).Day.Remaining())

	// Exhausted by settled spend: First once per window, then not.
	h3, err := l.Reserve("a", usd(0.7), t0)
	require.NoError(t, err)
	l.Settle(h3, usd(0.7), t0)
	_, err = l.Reserve("a", usd(0.5), t0)
	e = exceeded(t, err)
	require.True(t, e.First)
	require.False(t, e.Pending)
	_, err = l.Reserve("a", usd(0.5), t0.Add(time.Minute))
	require.False(t, exceeded(t, err).First)

	// Too large for the window whatever the wait.
	_, err = l.Reserve("a", usd(2), t0.Add(24*time.Hour))
	require.True(t, exceeded(t, err).TooLarge)
}

func TestWindowsResetOnTheFakeClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0) // 2026-03-31 23:00 UTC
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(1), Month: usd(1.5), Total: usd(2.5)}, clk.Now())
	h, err := l.Reserve("a", usd(0.9), clk.Now())
	require.NoError(t, err)
	// In flight across midnight: charged to the new day (and month).
	clk.Advance(2 * time.Hour)
	l.Settle(h, usd(0.9), clk.Now())
	acc := l.Account("a", clk.Now())
	require.Equal(t, usd(0.9), acc.Day.Spent)
	require.Equal(t, usd(0.9), acc.Month.Spent)
	_, err = l.Reserve("a", usd(0.2), clk.Now())
	require.Equal(t, quota.Day, exceeded(t, err).Window)

	// The next day the day window is fresh, the month is not.
	clk.Advance(24 * time.Hour)
	h, err = l.Reserve("a", usd(0.6), clk.Now())
	require.NoError(t, err)
	l.Settle(h, usd(0.6), clk.Now())
	_, err = l.Reserve("a", usd(0.1), clk.Now())
	e := exceeded(t, err)
	require.Equal(t, quota.Month, e.Window)
	require.Equal(t, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), e.ResetsAt)
	require.True(t, e.First)

	// Next month: only the total remains, and it never resets.
	clk.Advance(31 * 24 * time.Hour)
	h, err = l.Reserve("a", usd(0.9), clk.Now())
	require.NoError(t, err)
	l.Settle(h, usd(0.9), clk.Now())
	_, err = l.Reserve("a", usd(0.2), clk.Now())
	e = exceeded(t, err)
	require.Equal(t, quota.Total, e.Window)
	require.True(t, e.ResetsAt.IsZero())
	require.Equal(t, usd(2.4), l.Account("a", clk.Now()).Total.Spent)
}

func TestLoadPlacesSpendInItsWindows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 4, 15, 12, 0, 0, 0, time.UTC)
	l := quota.NewLedger()
	l.Load("a", time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC), usd(1), now)
	l.Load("a", time.Date(2026, 4, 2, 0, 0, 0, 0, time.UTC), usd(2), now)
	l.Load("a", time.Date(2026, 4, 15, 0, 0, 0, 0, time.UTC), usd(4), now)
	acc := l.Account("a", now)
	require.Equal(t, usd(4), acc.Day.Spent)
	require.Equal(t, usd(6), acc.Month.Spent)
	require.Equal(t, usd(7), acc.Total.Spent)
	require.Equal(t, pricing.Amount(-1), acc.Day.Remaining(), "no limit")
}

// TestRacersNeverOverspend is the invariant as a property: many goroutines
// race for a client's last dollars with random worst cases, each settling
// at a random share of its reservation (or refunded); the spend never
// exceeds the limit when settlements stay within their reservations, and
// exceeds it by at most one request's excess per racer when they do not.
func TestRacersNeverOverspend(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		l := quota.NewLedger()
		limit := usd(10)
		l.SetLimits("a", quota.Limits{Day: limit, Total: limit}, t0)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var granted pricing.Amount
		for g := range 16 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				for range 200 {
					need := usd(0.01 + rng.Float64())
					h, err := l.Reserve("a", need, t0)
					if err != nil {
						continue
					}
					actual := pricing.Amount(float64(need) * rng.Float64())
					if rng.IntN(5) == 0 {
						actual = 0 // failed: refunded
					}
					l.Settle(h, actual, t0)
					mu.Lock()
					granted += actual
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		acc := l.Account("a", t0)
		require.LessOrEqual(t, acc.Total.Spent, limit, "seed %d", seed)
		require.Equal(t, granted, acc.Total.Spent)
		require.Zero(t, acc.Total.Reserved)
	}
}

func TestRebaseKeepsReservations(t *testing.T) {
	t.Parallel()
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(10)}, t0)
	h, err := l.Reserve("a", usd(1), t0)
	require.NoError(t, err)
	l.Rebase("a", usd(8), usd(9), usd(20), t0) // what every node spent
	acc := l.Account("a", t0)
	require.Equal(t, usd(8), acc.Day.Spent)
	require.Equal(t, usd(9), acc.Month.Spent)
	require.Equal(t, usd(20), acc.Total.Spent)
	require.Equal(t, usd(1), acc.Day.Reserved)
	_, err = l.Reserve("a", usd(1.5), t0)
	require.Error(t, err)
	l.Settle(h, usd(0.5), t0)
	require.Equal(t, usd(8.5), l.Account("a", t0).Day.Spent)
}

func TestEmptyClientNameSettles(t *testing.T) {
	t.Parallel()
	l := quota.NewLedger()
	h, err := l.Reserve("", usd(1), t0)
	require.NoError(t, err)
	l.Settle(h, usd(0.5), t0)
	acc := l.Account("", t0)
	require.Zero(t, acc.Day.Reserved)
	require.Equal(t, usd(0.5), acc.Day.Spent)
	l.Settle(quota.Hold{}, usd(9), t0) // the zero Hold charges nothing
	require.Equal(t, usd(0.5), l.Account("", t0).Day.Spent)
}

// TestHeldCountsLikeReserved: the amount held on other processes counts
// in every window like this ledger's reservations (a refusal it causes is
// pending, not exhausted), shows in Usage.Reserved, shrinks a shared
// budget's remainder, and is replaced whole by the next SetHeld.
func TestHeldCountsLikeReserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		held        pricing.Amount
		spent       pricing.Amount
		need        pricing.Amount
		wantErr     bool
		wantPending bool
	}{
		{name: "fits beside what is held", held: usd(0.4), need: usd(0.6)},
		{name: "held elsewhere: pending", held: usd(0.5), need: usd(0.6), wantErr: true, wantPending: true},
		{name: "spent and held: pending", held: usd(0.3), spent: usd(0.3), need: usd(0.5), wantErr: true, wantPending: true},
		{name: "spent: exhausted", held: usd(0.3), spent: usd(0.6), need: usd(0.5), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := quota.NewLedger()
			l.SetLimits("a", quota.Limits{Day: usd(1), Total: usd(10)}, t0)
			l.Charge("a", tc.spent, 0, t0)
			l.SetHeld(map[string]pricing.Amount{"a": tc.held, "b": usd(1)}, t0)
			require.Equal(t, tc.held, l.Account("a", t0).Day.Reserved)
			require.Equal(t, tc.held, l.Account("a", t0).Total.Reserved)
			_, err := l.Reserve("a", tc.need, t0)
			if !tc.wantErr {
				require.NoError(t, err)
				return
			}
			e := exceeded(t, err)
			require.Equal(t, quota.Day, e.Window)
			require.Equal(t, tc.spent+tc.held, e.Used)
			require.Equal(t, tc.wantPending, e.Pending)
			// Released by the next SetHeld that leaves a out.
			l.SetHeld(map[string]pricing.Amount{"b": usd(1)}, t0)
			require.Zero(t, l.Account("a", t0).Day.Reserved)
			require.Equal(t, usd(1), l.Account("b", t0).Day.Reserved)
		})
	}

	// On a shared budget the held amount shrinks the remainder this
	// node's share applies to.
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(1)}, t0)
	l.SetShare("a", 0.5, t0)
	_, err := l.Reserve("a", usd(0.45), t0) // 0.45 <= 0.5 x 1
	require.NoError(t, err)
	l.SetHeld(map[string]pricing.Amount{"a": usd(0.2)}, t0)
	_, err = l.Reserve("a", usd(0.0), t0) // 0.45 > 0.5 x (1 - 0.2)
	require.Equal(t, 0.5, exceeded(t, err).Share)
}

// TestForceHoldsPastTheLimit: a forced reservation (a request sent before
// this ledger knew of it) is held whatever the limit, counts like any
// reservation against the next ones, and settles as Reserve's.
func TestForceHoldsPastTheLimit(t *testing.T) {
	t.Parallel()
	l := quota.NewLedger()
	l.SetLimits("a", quota.Limits{Day: usd(1)}, t0)
	h := l.Force("a", usd(1.5), t0)
	require.Equal(t, usd(1.5), h.Amount())
	require.Equal(t, usd(1.5), l.Account("a", t0).Day.Reserved)
	_, err := l.Reserve("a", usd(0.1), t0)
	require.True(t, exceeded(t, err).Pending, "held by the forced reservation")
	l.Settle(h, usd(0.4), t0)
	acc := l.Account("a", t0)
	require.Equal(t, usd(0.4), acc.Day.Spent)
	require.Zero(t, acc.Day.Reserved)
	_, err = l.Reserve("a", usd(0.5), t0)
	require.NoError(t, err)
}
