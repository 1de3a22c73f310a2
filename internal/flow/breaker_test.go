package flow_test

import (
	"cmp"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

type transitions []string

// testWindow is the breakers' window in these tests.
const testWindow = 30 * time.Second

// full returns cfg with its zero fields set to test values (the
// user-facing defaults live in package upstream).
func full(cfg flow.BreakerConfig) flow.BreakerConfig {
	cfg.Window = cmp.Or(cfg.Window, testWindow)
	cfg.MinRequests = cmp.Or(cfg.MinRequests, 10)
	cfg.FailureRatio = cmp.Or(cfg.FailureRatio, 0.5)
	cfg.ConsecutiveFailures = cmp.Or(cfg.ConsecutiveFailures, 5)
	cfg.OpenTimeout = cmp.Or(cfg.OpenTimeout, 3*time.Second)
	cfg.HalfOpenProbes = cmp.Or(cfg.HalfOpenProbes, 3)
	return cfg
}

func newBreaker(t *testing.T, cfg flow.BreakerConfig) (*flow.Breaker, *transitions) {
	t.Helper()
	var tr transitions
	b, err := flow.NewBreaker(full(cfg), rand.New(rand.NewPCG(1, 1)), func(from, to flow.BreakerState) {
		tr = append(tr, from.String()+">"+to.String())
	}, t0)
	require.NoError(t, err)
	return b, &tr
}

func run(t *testing.T, b *flow.Breaker, r flow.Result, now time.Time) {
	t.Helper()
	gen, err := b.Allow(now)
	require.NoError(t, err)
	b.Done(gen, r, now)
}

func TestBreakerTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		results []flow.Result
		open    bool
	}{
		{"consecutive failures", []flow.Result{flow.Failed, flow.Failed, flow.Failed}, true},
		{"success resets the streak", []flow.Result{flow.Failed, flow.Failed, flow.Healthy, flow.Failed, flow.Failed}, false},
		{"failure ratio with min requests", []flow.Result{flow.Failed, flow.Healthy, flow.Failed, flow.Healthy, flow.Healthy, flow.Failed}, true},
		{"ratio below min requests", []flow.Result{flow.Failed, flow.Healthy, flow.Failed, flow.Healthy, flow.Failed}, false},
		{"neutral never trips (rate, client errors)", []flow.Result{flow.Neutral, flow.Neutral, flow.Neutral, flow.Neutral, flow.Neutral, flow.Neutral, flow.Neutral}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := newBreaker(t, flow.BreakerConfig{ConsecutiveFailures: 3, MinRequests: 6, FailureRatio: 0.5})
			for _, r := range tt.results {
				run(t, b, r, t0)
			}
			s, _ := b.State(t0)
			require.Equal(t, tt.open, s == flow.Open, s.String())
		})
	}
}

func TestBreakerHalfOpenProbesAndClose(t *testing.T) {
	t.Parallel()
	b, tr := newBreaker(t, flow.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Second, HalfOpenProbes: 2})
	run(t, b, flow.Failed, t0)
	s, readyAt := b.State(t0)
	require.Equal(t, flow.Open, s)
	require.False(t, readyAt.Before(t0.Add(7500*time.Millisecond)))
	require.False(t, readyAt.After(t0.Add(12500*time.Millisecond)), "jittered 75-125%%")
	_, err := b.Allow(t0)
	require.ErrorIs(t, err, flow.ErrOpen)

	now := readyAt
	g1, err := b.Allow(now)
	require.NoError(t, err)
	g2, err := b.Allow(now)
	require.NoError(t, err)
	ok, _ := b.Ready(now)
	require.False(t, ok, "every probe is out")
	_, err = b.Allow(now)
	require.ErrorIs(t, err, flow.ErrOpen)
	b.Done(g1, flow.Healthy, now)
	b.Done(g2, flow.Healthy, now)
	s, _ = b.State(now)
	require.Equal(t, flow.Closed, s)
	require.Equal(t, transitions{"closed>open", "open>half_open", "half_open>closed"}, *tr)
}

func TestBreakerHalfOpenFailureReopens(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(t, flow.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 3})
	run(t, b, flow.Failed, t0)
	now := t0.Add(2 * time.Second)
	g, err := b.Allow(now)
	require.NoError(t, err)
	b.Done(g, flow.Failed, now)
	s, _ := b.State(now)
	require.Equal(t, flow.Open, s)
}

func TestBreakerIgnoresStaleGenerations(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(t, flow.BreakerConfig{ConsecutiveFailures: 2, OpenTimeout: time.Second, HalfOpenProbes: 1})
	stale, err := b.Allow(t0) // sent while closed, answers late
	require.NoError(t, err)
	run(t, b, flow.Failed, t0)
	run(t, b, flow.Failed, t0)
	now := t0.Add(2 * time.Second)
	probe, err := b.Allow(now) // half-open
	require.NoError(t, err)
	b.Done(stale, flow.Failed, now) // from the closed generation: ignored
	s, _ := b.State(now)
	require.Equal(t, flow.HalfOpen, s)
	b.Done(probe, flow.Healthy, now)
	s, _ = b.State(now)
	require.Equal(t, flow.Closed, s)

	// The closed window resets counts (a new generation) when it ends.
	late, err := b.Allow(now)
	require.NoError(t, err)
	run(t, b, flow.Failed, now)
	now = now.Add(testWindow)
	b.Done(late, flow.Failed, now) // previous window: ignored
	run(t, b, flow.Failed, now)
	s, _ = b.State(now)
	require.Equal(t, flow.Closed, s, "one failure per window does not make two in a row")
}

func TestBreakerConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := flow.NewBreaker(full(flow.BreakerConfig{FailureRatio: 1.5}), nil, nil, t0)
	require.ErrorContains(t, err, "Breaker.FailureRatio")
	_, err = flow.NewBreaker(full(flow.BreakerConfig{HalfOpenProbes: -1}), nil, nil, t0)
	require.ErrorContains(t, err, "Breaker.HalfOpenProbes")
	_, err = flow.NewBreaker(flow.BreakerConfig{}, nil, nil, t0)
	require.ErrorContains(t, err, "Breaker.Window", "no defaults here: upstream.Config has them")
}

// TestBreakerOutageSince checks the outage start is the moment the breaker
// left Closed, kept while probes fail and cleared once it closes again.
func TestBreakerOutageSince(t *testing.T) {
	t.Parallel()
	b, _ := newBreaker(t, flow.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Second, HalfOpenProbes: 1})
	require.True(t, b.OutageSince().IsZero())
	run(t, b, flow.Failed, t0)
	require.Equal(t, t0, b.OutageSince())
	later := t0.Add(time.Minute) // past the open period: half-open, and the probe fails
	run(t, b, flow.Failed, later)
	s, _ := b.State(later)
	require.Equal(t, flow.Open, s)
	require.Equal(t, t0, b.OutageSince(), "a failed probe continues the same outage")
	run(t, b, flow.Healthy, later.Add(time.Minute))
	require.True(t, b.OutageSince().IsZero())
}

// TestBreakerClusterControls: OpenUntil opens a closed breaker until the
// given instant (or half-opens it at once when that has passed), extends
// a shorter opening and reopens a half-open one; SetProbeLimit(0) holds a
// half-open breaker without probes; Reset closes it.
func TestBreakerClusterControls(t *testing.T) {
	t.Parallel()
	b, tr := newBreaker(t, flow.BreakerConfig{HalfOpenProbes: 2})
	until := t0.Add(10 * time.Second)
	b.OpenUntil(until, t0)
	s, at := b.State(t0)
	require.Equal(t, flow.Open, s)
	require.Equal(t, until, at)
	require.Equal(t, t0, b.OutageSince())
	b.OpenUntil(t0.Add(5*time.Second), t0) // earlier: ignored
	_, at = b.State(t0)
	require.Equal(t, until, at)

	b.SetProbeLimit(0)
	s, _ = b.State(until)
	require.Equal(t, flow.HalfOpen, s)
	ok, readyAt := b.Ready(until)
	require.False(t, ok, "no probe without the token")
	require.True(t, readyAt.IsZero())
	_, err := b.Allow(until)
	require.ErrorIs(t, err, flow.ErrOpen)
	b.SetProbeLimit(-1)
	_, err = b.Allow(until)
	require.NoError(t, err)

	// Half-open and another node's probe failed: reopen until its end.
	b.OpenUntil(until.Add(3*time.Second), until)
	s, _ = b.State(until)
	require.Equal(t, flow.Open, s)
	b.Reset(until)
	s, _ = b.State(until)
	require.Equal(t, flow.Closed, s)
	require.True(t, b.OutageSince().IsZero())

	// An opening already over half-opens a closed breaker at once.
	b.OpenUntil(until.Add(-time.Second), until)
	s, _ = b.State(until)
	require.Equal(t, flow.HalfOpen, s)
	require.Equal(t, transitions{"closed>open", "open>half_open", "half_open>open", "open>closed", "closed>open", "open>half_open"}, *tr)
}
