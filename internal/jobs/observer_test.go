package jobs

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// recorder is an Observer that tallies every event.
type recorder struct {
	NopObserver // the batch routing's events: batch_router_test.go
	mu          sync.Mutex
	got         observed
	bad         atomic.Int64 // negative durations seen
}

// observed is what a recorder saw. Maps are keyed "upstream", "upstream
// outcome" or "upstream state"; empty ones stay nil, so tests can compare
// with a literal that leaves them out.
type observed struct {
	Submitted map[string]int
	Started   map[string]int
	Attempts  map[string]int
	Finished  map[string]int
	Rescued   jobstore.RescueResult
	Webhooks  map[WebhookOutcome]int
}

var _ Observer = (*recorder)(nil)

func add[K comparable](m *map[K]int, k K, n int) {
	if *m == nil {
		*m = map[K]int{}
	}
	(*m)[k] += n
}

func (r *recorder) Submitted(upstream string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	add(&r.got.Submitted, upstream, n)
}

func (r *recorder) Started(upstream string, wait time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if wait < 0 {
		r.bad.Add(1)
	}
	add(&r.got.Started, upstream, 1)
}

func (r *recorder) Attempted(upstream string, outcome AttemptOutcome, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d < 0 {
		r.bad.Add(1)
	}
	add(&r.got.Attempts, upstream+" "+string(outcome), 1)
}

func (r *recorder) Finished(upstream string, state jobstore.State, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	add(&r.got.Finished, upstream+" "+string(state), n)
}

func (r *recorder) Rescued(res jobstore.RescueResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got.Rescued.Requeued += res.Requeued
	r.got.Rescued.Dead += res.Dead
	r.got.Rescued.Expired += res.Expired
}

func (r *recorder) Webhook(outcome WebhookOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	add(&r.got.Webhooks, outcome, 1)
}

func (r *recorder) snapshot() observed {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := func(m map[string]int) map[string]int {
		if m == nil {
			return nil
		}
		out := make(map[string]int, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	o := observed{Submitted: c(r.got.Submitted), Started: c(r.got.Started), Attempts: c(r.got.Attempts),
		Finished: c(r.got.Finished), Rescued: r.got.Rescued}
	if r.got.Webhooks != nil {
		o.Webhooks = map[WebhookOutcome]int{}
		for k, v := range r.got.Webhooks {
			o.Webhooks[k] = v
		}
	}
	return o
}

// expect waits until r saw exactly want (events arrive just after the
// store shows their effect), and fails with the difference if it never does.
func expect(t *testing.T, r *recorder, want observed) {
	t.Helper()
	assert.Eventually(t, func() bool { return reflect.DeepEqual(r.snapshot(), want) }, 10*time.Second, time.Millisecond)
	require.Equal(t, want, r.snapshot())
	require.Zero(t, r.bad.Load(), "negative durations")
}

// TestObserverFollowsJobLifecycles: the events of a job's life, for every
// way an attempt can end through the dispatcher.
func TestObserverFollowsJobLifecycles(t *testing.T) {
	t.Parallel()
	rate := &llm.Outcome{Kind: llm.Rate, Status: 429, RetryAfter: time.Hour, HasRetryAfter: true}
	overload := &llm.Outcome{Kind: llm.Overload, Status: 529}
	cases := []struct {
		name   string
		resp   func(call int64) (*dispatch.Response, error)
		extra  string // the submit's extra fields
		replay bool   // submit it twice (the second answers the first job)
		final  jobstore.State
		calls  int
		want   observed
	}{
		{"success", func(int64) (*dispatch.Response, error) { return reply(200, okMessage), nil }, "", false, jobstore.StateSucceeded, 1, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
			Attempts: map[string]int{"claude success": 1}, Finished: map[string]int{"claude succeeded": 1},
		}},
		{"idempotent replay is not a submit", func(int64) (*dispatch.Response, error) { return reply(200, okMessage), nil },
			`,"idempotency_key":"k"`, true, jobstore.StateSucceeded, 1, observed{
				Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
				Attempts: map[string]int{"claude success": 1}, Finished: map[string]int{"claude succeeded": 1},
			}},
		{"client error is terminal", func(int64) (*dispatch.Response, error) {
			return reply(400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`), nil
		}, "", false, jobstore.StateDead, 1, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
			Attempts: map[string]int{"claude dead": 1}, Finished: map[string]int{"claude dead": 1},
		}},
		{"rate limit waits for its hint", func(int64) (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 429, Message: "rate limited", RetryAfter: time.Hour, Last: rate}
		}, "", false, jobstore.StateQueued, 1, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
			Attempts: map[string]int{"claude rate_limited": 1},
		}},
		{"overload retries", func(int64) (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Message: "overloaded", RetryAfter: time.Hour, Last: overload}
		}, "", false, jobstore.StateQueued, 1, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
			Attempts: map[string]int{"claude retry": 1},
		}},
		{"overload on the last attempt kills", func(int64) (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Message: "overloaded", Last: overload}
		}, `,"max_attempts":1`, false, jobstore.StateDead, 1, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
			Attempts: map[string]int{"claude dead": 1}, Finished: map[string]int{"claude dead": 1},
		}},
		{"a stopped dispatcher hands the job back", func(call int64) (*dispatch.Response, error) {
			if call == 1 {
				return nil, &dispatch.Error{Reason: dispatch.ErrStopped, Status: 503, Message: "stopped"}
			}
			return reply(200, okMessage), nil // a second later, without a burnt attempt
		}, "", false, jobstore.StateSucceeded, 2, observed{
			Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 2},
			Attempts: map[string]int{"claude stopped": 1, "claude success": 1}, Finished: map[string]int{"claude succeeded": 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			var calls atomic.Int64
			d := &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) { return tc.resp(calls.Add(1)) }}
			st := openStore(t)
			s := newService(t, st, d, nil, func(c *Config) {
				c.Observer = rec
				c.Retry.BaseDelay, c.Retry.MaxDelay = time.Hour, time.Hour // a requeued job waits: one attempt each
			})
			id := submit(t, s, tc.extra).ID
			if tc.replay {
				code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+tc.extra+`}`)
				require.Equal(t, http.StatusOK, code, string(body))
				require.Equal(t, id, decode[jobsapi.JobView](t, body).ID)
			}
			waitFor(t, st, id, tc.final)
			expect(t, rec, tc.want)
			require.Equal(t, tc.calls, d.Calls())
		})
	}
}

// TestObserverCancelAndStop: a cancel through the API finishes a job once;
// a stop hands a running one back.
func TestObserverCancelAndStop(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 2)
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
	rec := &recorder{}
	st := openStore(t)
	s := newService(t, st, d, nil, func(c *Config) { c.Observer = rec })
	canceled := submit(t, s, "")
	<-entered
	for range 2 { // the second cancel is a no-op
		code, body := do(t, s.Handler(), "DELETE", "/v1/jobs/"+formatID(canceled.ID), "")
		require.Equal(t, http.StatusOK, code, string(body))
	}
	expect(t, rec, observed{
		Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
		Attempts: map[string]int{"claude canceled": 1}, Finished: map[string]int{"claude canceled": 1},
	})

	stopped := submit(t, s, "")
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: abort at once
	require.NoError(t, s.Stop(ctx))
	waitFor(t, st, stopped.ID, jobstore.StateQueued)
	expect(t, rec, observed{
		Submitted: map[string]int{"claude": 2}, Started: map[string]int{"claude": 2},
		Attempts: map[string]int{"claude canceled": 1, "claude stopped": 1}, Finished: map[string]int{"claude canceled": 1},
	})
}

// TestObserverBatch: a batch counts all its jobs as submitted, and its
// cancel all those it canceled.
func TestObserverBatch(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := newService(t, nil, succeed(), nil, func(c *Config) { c.Observer = rec; c.Owner = "manual" })
	lines := []string{
		`{"custom_id":"a","params":` + anthropicBody + `}`,
		`{"custom_id":"b","params":` + anthropicBody + `}`,
		`{"custom_id":"c","params":` + anthropicBody + `}`,
	}
	code, body := do(t, s.Handler(), "POST", "/v1/batches?upstream=claude", strings.Join(lines, "\n"))
	require.Equal(t, http.StatusOK, code, string(body))
	b := decode[jobsapi.BatchView](t, body)
	expect(t, rec, observed{Submitted: map[string]int{"claude": 3}})
	for range 2 { // nothing is left to cancel the second time
		code, body = do(t, s.Handler(), "POST", "/v1/batches/"+b.ID+"/cancel", "")
		require.Equal(t, http.StatusOK, code, string(body))
	}
	expect(t, rec, observed{Submitted: map[string]int{"claude": 3}, Finished: map[string]int{"claude canceled": 3}})
}

// TestObserverRescueAndLostLease: the rescuer's pass is reported, and the
// stalled worker whose job it took back reports a lost lease, not a
// success.
func TestObserverRescueAndLostLease(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	stale, entered, unblock := gated(okMessage)
	recA, recB := &recorder{}, &recorder{}
	ps := &pausedStore{Store: st}
	a := newService(t, ps, stale, nil, func(c *Config) {
		c.Clock, c.Owner, c.Observer, c.LeaseFor, c.RescueInterval = clk, "A", recA, 30*time.Second, time.Hour
	})
	j := submit(t, a, "")
	<-entered
	ps.frozen.Store(true)
	clk.Advance(31 * time.Second) // A's heartbeats go nowhere; its lease runs out
	res, err := a.rescuer.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, jobstore.RescueResult{Requeued: 1}, res)

	b := newService(t, st, succeed(), nil, func(c *Config) { c.Clock, c.Owner, c.Observer, c.RescueInterval = clk, "B", recB, -1 })
	waitFor(t, st, j.ID, jobstore.StateSucceeded)
	require.NoError(t, b.Stop(context.Background()))
	unblock()
	require.NoError(t, a.Stop(context.Background()))
	expect(t, recA, observed{
		Submitted: map[string]int{"claude": 1}, Started: map[string]int{"claude": 1},
		Attempts: map[string]int{"claude lease_lost": 1}, Rescued: jobstore.RescueResult{Requeued: 1},
	})
	expect(t, recB, observed{
		Started: map[string]int{"claude": 1}, Attempts: map[string]int{"claude success": 1},
		Finished: map[string]int{"claude succeeded": 1},
	})
}

// TestObserverQueueWait: the wait runs from the job's availability to the
// start of its attempt, on the service's clock.
func TestObserverQueueWait(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var waits []time.Duration
	var mu sync.Mutex
	obs := waitObserver{fn: func(d time.Duration) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}}
	st := openStore(t)
	s := newService(t, st, succeed(), nil, func(c *Config) { c.Clock, c.Observer, c.Owner = clk, obs, "manual" })
	j := submit(t, s, "")
	clk.Advance(90 * time.Second)
	require.NoError(t, s.Start(context.Background()))
	waitFor(t, st, j.ID, jobstore.StateSucceeded)
	require.NoError(t, s.Stop(context.Background()))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []time.Duration{90 * time.Second}, waits)
}

type waitObserver struct {
	NopObserver
	fn func(time.Duration)
}

func (w waitObserver) Started(_ string, d time.Duration) { w.fn(d) }
