package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeTimersFireInOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := clock.NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	require.Equal(t, 2, f.Timers())

	f.Advance(1500 * time.Millisecond)
	require.Equal(t, start.Add(time.Second), <-b.C())
	select {
	case <-a.C():
		t.Fatal("a fired early")
	default:
	}
	require.Equal(t, start.Add(1500*time.Millisecond), f.Now())

	require.True(t, a.Reset(time.Second))
	f.Advance(time.Second)
	require.Equal(t, start.Add(2500*time.Millisecond), <-a.C())
	require.False(t, a.Stop())
}

func TestFakeZeroTimerFiresAtOnce(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Unix(0, 0))
	tm := f.NewTimer(0)
	<-tm.C()
	require.Equal(t, 0, f.Timers())
}

func TestSleepOnFake(t *testing.T) {
	t.Parallel()
	f := clock.NewFake(time.Unix(100, 0))
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), f, time.Minute) }()
	require.True(t, f.WaitForTimers(1, 5*time.Second))
	f.Advance(time.Minute)
	require.NoError(t, <-done)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, clock.Sleep(ctx, f, time.Hour), context.Canceled)
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	c := clock.Or(nil)
	before := c.Now()
	require.NoError(t, clock.Sleep(context.Background(), c, time.Millisecond))
	require.GreaterOrEqual(t, clock.Since(c, before), time.Millisecond)
}

// TestStepUntilMovesFromRestToRest: each goroutine acts on what the last
// step set off before the clock moves again, so a chain of work measures
// its own time however slowly its goroutines are scheduled.
func TestStepUntilMovesFromRestToRest(t *testing.T) {
	// Not parallel: Settle reads the whole process's scheduler.
	f := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := f.Now()
	done := make(chan time.Time)
	go func() {
		// Three 100 ms waits, with work between them that takes real time.
		for range 3 {
			if err := clock.Sleep(context.Background(), f, 100*time.Millisecond); err != nil {
				panic(err)
			}
			for i := range 1_000_000 {
				_ = i * i
			}
		}
		done <- f.Now()
	}()
	var end time.Time
	require.NoError(t, f.StepUntil(func() bool {
		select {
		case end = <-done:
			return true
		default:
			return false
		}
	}, time.Minute))
	require.Equal(t, 300*time.Millisecond, end.Sub(start))
	require.ErrorIs(t, f.StepUntil(func() bool { return false }, time.Minute), clock.ErrNothingWaits)
}
