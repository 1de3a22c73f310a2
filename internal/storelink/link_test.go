package storelink_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/storelink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBackoffBounds: every wait is within [d/2, d] of the capped doubling
// d, and never above the cap, whatever the jitter.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	minW, maxW := 250*time.Millisecond, 15*time.Second
	for attempt := range 40 {
		d := minW << min(attempt, 20)
		d = min(d, maxW)
		for _, j := range []float64{0, 0.25, 0.5, 0.999, -1, 2} {
			got := storelink.Backoff(attempt, minW, maxW, j)
			require.GreaterOrEqual(t, got, d/2, "attempt %d jitter %v", attempt, j)
			require.LessOrEqual(t, got, d, "attempt %d jitter %v", attempt, j)
			require.LessOrEqual(t, got, maxW)
		}
	}
	require.Equal(t, maxW/2, storelink.Backoff(1000, minW, maxW, 0), "no overflow on a long outage")
}

// step moves clk from one of the link's timers to the next until done
// holds (the link arms its next timer only after it has acted on the
// last one, so done is checked once the link is at rest).
func step(t *testing.T, clk *clock.Fake, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if done() {
			return
		}
		if !clk.WaitForTimers(1, 20*time.Millisecond) || done() {
			continue
		}
		next, _ := clk.Next()
		clk.Set(next)
	}
	t.Fatal("not done within 10s")
}

type recorder struct {
	mu     sync.Mutex
	states []bool
}

func (r *recorder) observe(_ string, up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, up)
}

func (r *recorder) get() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.states...)
}

// TestLinkRetriesWithBackoffThenConnects: Start returns before any
// attempt succeeds; failed attempts are retried after the jittered,
// capped backoff on the fake clock (no attempt before it is due); the
// first success marks the link connected, once.
func TestLinkRetriesWithBackoffThenConnects(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	var mu sync.Mutex
	var at []time.Time
	fails := 6
	rec := &recorder{}
	l, err := storelink.New(storelink.Config{Name: "jobs", Clock: clk, Jitter: func() float64 { return 0.5 },
		BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, Observer: rec.observe,
		Open: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, clk.Now())
			if len(at) <= fails {
				return errors.New("connection refused")
			}
			return nil
		}})
	require.NoError(t, err)
	require.NoError(t, l.Start(t.Context()))
	defer func() { require.NoError(t, l.Stop(context.Background())) }()
	step(t, clk, func() bool {
		select {
		case <-l.Opened():
			return true
		default:
			return false
		}
	})
	st, attempts, lastErr := l.State()
	require.Equal(t, storelink.Connected, st)
	require.Equal(t, fails, attempts)
	require.NoError(t, lastErr)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, fails+1)
	for i := 1; i < len(at); i++ {
		want := storelink.Backoff(i-1, 100*time.Millisecond, time.Second, 0.5)
		require.Equal(t, want, at[i].Sub(at[i-1]), "wait before attempt %d", i+1)
	}
	require.Equal(t, []bool{false, true}, rec.get())
}

// TestLinkStartDoesNotWaitForABlackholedStore: an Open that blocks until
// its context ends (a store that accepts and never answers) neither
// delays Start nor outlives Stop.
func TestLinkStartDoesNotWaitForABlackholedStore(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	l, err := storelink.New(storelink.Config{Name: "cluster", AttemptTimeout: time.Hour,
		Open: func(ctx context.Context) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}})
	require.NoError(t, err)
	require.NoError(t, l.Start(t.Context())) // returns while Open blocks
	<-entered
	st, _, _ := l.State()
	require.Equal(t, storelink.Connecting, st)
	require.NoError(t, l.Stop(context.Background()))
}

// TestLinkPingReportsLossAndReturn: once open, a failing ping marks the
// store lost and a passing one connected again, each change observed
// once.
func TestLinkPingReportsLossAndReturn(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	var mu sync.Mutex
	var down bool
	rec := &recorder{}
	l, err := storelink.New(storelink.Config{Name: "jobs", Clock: clk, PingInterval: time.Second, Observer: rec.observe,
		Open: func(context.Context) error { return nil },
		Ping: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return errors.New("timeout")
			}
			return nil
		}})
	require.NoError(t, err)
	require.NoError(t, l.Start(t.Context()))
	defer func() { require.NoError(t, l.Stop(context.Background())) }()
	<-l.Opened()
	state := func(want storelink.State) func() bool {
		return func() bool { s, _, _ := l.State(); return s == want }
	}
	mu.Lock()
	down = true
	mu.Unlock()
	step(t, clk, state(storelink.Lost))
	mu.Lock()
	down = false
	mu.Unlock()
	step(t, clk, state(storelink.Connected))
	require.Equal(t, []bool{false, true, false, true}, rec.get())
}

// TestLinkConfigErrorsNameTheField: a bad config is refused, naming the
// field.
func TestLinkConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	open := func(context.Context) error { return nil }
	for _, tc := range []struct {
		cfg  storelink.Config
		want string
	}{
		{storelink.Config{Open: open}, "Name"},
		{storelink.Config{Name: "jobs"}, "Open"},
		{storelink.Config{Name: "jobs", Open: open, BackoffMin: time.Microsecond}, "BackoffMin"},
		{storelink.Config{Name: "jobs", Open: open, BackoffMin: time.Second, BackoffMax: time.Millisecond}, "BackoffMax"},
	} {
		_, err := storelink.New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

// TestLinkAwaitIsBounded: Await reports an open store at once, and gives
// up on one still connecting after its bound on the link's clock.
func TestLinkAwaitIsBounded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	release := make(chan struct{})
	l, err := storelink.New(storelink.Config{Name: "jobs", Clock: clk, Open: func(ctx context.Context) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	require.NoError(t, err)
	require.NoError(t, l.Start(t.Context()))
	defer func() { require.NoError(t, l.Stop(context.Background())) }()
	done := make(chan bool, 1)
	go func() { done <- l.Await(t.Context(), storelink.StartWait) }()
	require.True(t, clk.WaitForTimers(1, 10*time.Second))
	clk.Advance(storelink.StartWait)
	require.False(t, <-done, "still connecting after the bound")
	close(release)
	require.True(t, l.Await(t.Context(), time.Hour), "open: at once")
}

// TestLinkAwaitDoesNotWaitForARefusal: a store that refuses its first
// attempt at once costs Await nothing (no time passes on the clock).
func TestLinkAwaitDoesNotWaitForARefusal(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	l, err := storelink.New(storelink.Config{Name: "cluster", Clock: clk,
		Open: func(context.Context) error { return errors.New("connection refused") }})
	require.NoError(t, err)
	require.NoError(t, l.Start(t.Context()))
	defer func() { require.NoError(t, l.Stop(context.Background())) }()
	start := clk.Now()
	require.False(t, l.Await(t.Context(), time.Hour))
	require.Equal(t, start, clk.Now())
}
