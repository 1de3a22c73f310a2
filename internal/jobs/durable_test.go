package jobs

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// answer is one scripted upstream answer.
type answer struct {
	status int
	body   string
}

var (
	answerOK       = answer{200, okMessage}
	answerOverload = answer{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
)

// scriptedUpstream is a provider answering from a script (the last answer
// repeats) and counting the calls it got.
type scriptedUpstream struct {
	calls  atomic.Int32
	script []answer
}

// breakerLog records the breaker's transitions.
type breakerLog struct {
	dispatch.NopObserver
	mu  sync.Mutex
	got []string
}

func (b *breakerLog) BreakerStateChanged(from, to flow.BreakerState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, from.String()+">"+to.String())
}

func (b *breakerLog) transitions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

// realEngine starts a real dispatcher on clk against a scripted upstream.
func realEngine(t *testing.T, clk clock.Clock, mod func(*dispatch.Config), script ...answer) (*dispatch.Dispatcher, *scriptedUpstream, *breakerLog) {
	t.Helper()
	up := &scriptedUpstream{script: script}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := int(up.calls.Add(1)) - 1
		a := up.script[min(n, len(up.script)-1)]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	log := &breakerLog{}
	cfg := dispatch.Config{Config: upstream.Config{Name: "claude", Protocol: llm.Anthropic, BaseURL: srv.URL, APIKey: "sk", JitterAllowance: -1},
		Clock: clk, Observer: log, Rand: rand.New(rand.NewPCG(1, 2))}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dispatch.New(cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return d, up, log
}

// TestOverloadedUpstreamBoundsProviderCalls: against an upstream that
// always answers 529, a job with max_attempts 3 makes exactly 3 provider
// calls and ends dead with each call's error in its history, also when
// the breaker opens meanwhile and its half-open probe is one of the calls.
func TestOverloadedUpstreamBoundsProviderCalls(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		breaker upstream.Breaker
		want    []string // breaker transitions that must have happened
	}{
		{"breaker stays closed", upstream.Breaker{ConsecutiveFailures: 100, MinRequests: 100}, nil},
		{"breaker opens and a probe is the third call",
			upstream.Breaker{ConsecutiveFailures: 2, MinRequests: 100, OpenTimeout: 30 * time.Millisecond, HalfOpenProbes: 1},
			[]string{"closed>open", "open>half_open", "half_open>open"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, up, log := realEngine(t, clock.Real(), func(c *dispatch.Config) { c.Breaker = tc.breaker }, answerOverload)
			st := openStore(t)
			s := newService(t, st, d, nil, func(c *Config) {
				c.Clock = clock.Real()
				c.Retry.BaseDelay, c.Retry.MaxDelay = time.Millisecond, 2*time.Millisecond
				c.PollInterval = 5 * time.Millisecond
			})
			j := submit(t, s, `,"max_attempts":3`)
			v := await(t, s, j.ID)
			require.Equal(t, jobstore.StateDead, v.State)
			require.EqualValues(t, 3, up.calls.Load(), "max_attempts bounds the provider calls")
			got, err := st.Get(context.Background(), j.ID)
			require.NoError(t, err)
			require.Equal(t, 3, got.Attempts)
			require.Len(t, got.Errors, 3, "one history entry per call")
			for i, e := range got.Errors {
				require.Equal(t, i+1, e.Attempt)
				require.Equal(t, 529, e.Status)
				require.Equal(t, llm.Overload.String(), e.Kind)
			}
			for _, w := range tc.want {
				require.Contains(t, log.transitions(), w)
			}
		})
	}
}

// TestWaitingJobHoldsNoLease: a job that waits for quota or for an open
// breaker waits queued in the store, without a lease (so it is not
// counted as running), while its admission waits in the engine; once
// admitted it runs without having burnt an attempt for the wait.
func TestWaitingJobHoldsNoLease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		engine func(*dispatch.Config)
		script []answer
		// prepare brings the upstream into the waiting state; the job it
		// returns is the one that must wait.
		prepare func(t *testing.T, s *testService, clk *clock.Fake) int64
		burnt   int
	}{
		{"quota", func(c *dispatch.Config) { c.Limits.RequestsPerMinute = 2 }, []answer{answerOK},
			func(t *testing.T, s *testService, clk *clock.Fake) int64 {
				first := submit(t, s, "").ID
				stepUntil(t, clk, time.Second, func() bool { return finished(t, s, first) })
				return submit(t, s, "").ID // the bucket is empty for ~30 s
			}, 0},
		{"open breaker", func(c *dispatch.Config) {
			c.Breaker = upstream.Breaker{ConsecutiveFailures: 1, MinRequests: 100, OpenTimeout: time.Hour, HalfOpenProbes: 1}
		}, []answer{answerOverload, answerOK},
			func(t *testing.T, s *testService, clk *clock.Fake) int64 {
				j := submit(t, s, `,"max_attempts":3`).ID // its 529 opens the breaker
				require.Eventually(t, func() bool {
					got, err := s.store.Get(context.Background(), j)
					return err == nil && got.State == jobstore.StateQueued && got.Attempts == 1
				}, 10*time.Second, time.Millisecond)
				clk.Advance(5 * time.Second) // past its backoff, far from the half-open
				return j
			}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			d, up, _ := realEngine(t, clk, tc.engine, tc.script...)
			st := openStore(t)
			s := newService(t, st, d, nil, func(c *Config) {
				c.Clock = clk
				c.Retry.BaseDelay, c.Retry.MaxDelay = time.Second, time.Second
				c.PollInterval = time.Second
				c.RescueInterval = -1
			})
			id := tc.prepare(t, s, clk)
			calls := up.calls.Load()
			// The job's admission waits in the engine's scheduler...
			stepUntil(t, clk, 100*time.Millisecond, func() bool { return d.Snapshot().Queued[llm.Low] == 1 })
			// ...while the job itself is queued and holds no lease.
			j, err := st.Get(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateQueued, j.State)
			require.True(t, j.Lease.ExpiresAt.IsZero(), "no lease while waiting")
			require.Equal(t, tc.burnt, j.Attempts)
			counts, err := st.CountLive(context.Background(), clk.Now())
			require.NoError(t, err)
			for _, c := range counts {
				require.Zero(t, c.Running, "nothing counts as running while it waits")
			}
			require.Equal(t, calls, up.calls.Load(), "nothing was sent")

			stepUntil(t, clk, time.Minute, func() bool { return finished(t, s, id) })
			j, err = st.Get(context.Background(), id)
			require.NoError(t, err)
			require.Equal(t, jobstore.StateSucceeded, j.State)
			require.Equal(t, tc.burnt+1, j.Attempts, "the wait burnt nothing, the success counts: %+v", j.Errors)
			require.Len(t, j.Errors, tc.burnt)
			require.Equal(t, calls+1, up.calls.Load())
		})
	}
}

// finished reports whether job id is finished.
func finished(t *testing.T, s *testService, id int64) bool {
	t.Helper()
	j, err := s.store.Get(context.Background(), id)
	require.NoError(t, err)
	return j.State.Finished()
}

// stepUntil advances clk by step (at most 200 times, letting the engine
// and the worker act between steps: twenty looks at done each) until done
// holds.
func stepUntil(t *testing.T, clk *clock.Fake, step time.Duration, done func() bool) {
	t.Helper()
	looks, steps := 0, 0
	require.Eventually(t, func() bool {
		if done() {
			return true
		}
		if looks++; looks%20 == 0 && steps < 200 {
			clk.Advance(step)
			steps++
		}
		return false
	}, 30*time.Second, time.Millisecond, "condition never reached while stepping the clock")
}

// TestCostMemory: an admission reserves the largest of a class's recent
// costs; a forgotten class reserves nothing.
func TestCostMemory(t *testing.T) {
	t.Parallel()
	var m costMemory
	require.Equal(t, provider.Cost{}, m.estimate(llm.Low))
	m.remember(llm.Low, provider.Cost{InputTokens: 10, OutputTokens: 500})
	m.remember(llm.Low, provider.Cost{InputTokens: 300, OutputTokens: 20})
	m.remember(llm.High, provider.Cost{InputTokens: 9999})
	require.Equal(t, provider.Cost{InputTokens: 300, OutputTokens: 500}, m.estimate(llm.Low))
	for range costMemoryLen {
		m.remember(llm.Low, provider.Cost{InputTokens: 1, OutputTokens: 1})
	}
	require.Equal(t, provider.Cost{InputTokens: 1, OutputTokens: 1}, m.estimate(llm.Low), "only the last few count")
	m.forget(llm.High)
	require.Equal(t, provider.Cost{}, m.estimate(llm.High))
}
