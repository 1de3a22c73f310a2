package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// outageDispatcher is a fake engine that can be in an outage: while down
// it is Unavailable, admits nothing at once and holds Acquire until it is
// back (up), as an open breaker holds a job's admission; waiting is
// signalled once an Acquire is held.
type outageDispatcher struct {
	*fakeDispatcher
	down    atomic.Bool
	up      chan struct{}
	waiting chan struct{}
	once    sync.Once
}

func newOutage(d *fakeDispatcher) *outageDispatcher {
	o := &outageDispatcher{fakeDispatcher: d, up: make(chan struct{}), waiting: make(chan struct{})}
	o.down.Store(true)
	return o
}

func (o *outageDispatcher) Unavailable() bool { return o.down.Load() }

// recover ends the outage.
func (o *outageDispatcher) recover() {
	o.down.Store(false)
	close(o.up)
}

func (o *outageDispatcher) Acquire(ctx context.Context, p dispatch.AcquireParams) (*dispatch.Ticket, error) {
	if o.down.Load() {
		o.once.Do(func() { close(o.waiting) })
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-o.up:
		}
	}
	return o.fakeDispatcher.Acquire(ctx, p)
}

func (o *outageDispatcher) TryAcquire(p dispatch.AcquireParams) (*dispatch.Ticket, bool) {
	if o.down.Load() {
		return nil, false
	}
	return o.fakeDispatcher.TryAcquire(p)
}

// modelRecorder answers okMessage and records the model of each call.
func modelRecorder() (*fakeDispatcher, func() []string) {
	var mu sync.Mutex
	var models []string
	d := &fakeDispatcher{fn: func(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		var b struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(req.Body, &b)
		mu.Lock()
		models = append(models, b.Model)
		mu.Unlock()
		return reply(200, okMessage), nil
	}}
	return d, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), models...)
	}
}

// TestJobsFallBackWhileTheirUpstreamIsUnavailable: a job whose upstream
// is in an outage is served by the fallback (its model rewritten, the
// result naming who served it, its idempotency key still finding it),
// unless its class may not fall back: then it waits for its upstream.
func TestJobsFallBackWhileTheirUpstreamIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		priority string
		fallback bool
	}{
		{"allowed class falls back", "critical", true},
		{"other class waits for its upstream", "low", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primaryFake, primaryModels := modelRecorder()
			primary := newOutage(primaryFake)
			backup, backupModels := modelRecorder()
			layer, err := admit.New(admit.Config{Upstreams: []upcfg.Config{
				{Name: "claude", Protocol: llm.Anthropic, FallbackClasses: []string{"critical", "high"},
					Fallbacks: []upcfg.Fallback{{Upstream: "claude-b", Models: map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5"}}}},
				{Name: "claude-b", Protocol: llm.Anthropic}}})
			require.NoError(t, err)
			layer.Bind(map[string]admit.Engine{"claude": primary, "claude-b": backup})
			s := newService(t, nil, primary, nil, func(c *Config) {
				c.Dispatchers["claude-b"] = backup
				c.Protocols["claude-b"] = llm.Anthropic
				c.Admission = layer
			})
			req := `{"upstream":"claude","priority":"` + tc.priority + `","idempotency_key":"k-` + tc.priority + `","request":` + anthropicBody + `}`
			code, body := do(t, s.Handler(), "POST", "/v1/jobs", req)
			require.Equal(t, http.StatusAccepted, code, string(body))
			id := decode[jobsapi.JobView](t, body).ID
			if !tc.fallback {
				// The job waits for its upstream while it is down...
				<-primary.waiting
				require.Empty(t, backupModels(), "a low job does not fall back")
				require.Empty(t, primaryModels())
				primary.recover() // ...and runs there once it is back.
			}
			v := await(t, s, id)
			require.Equal(t, "succeeded", string(v.State))
			require.Equal(t, "claude", v.Upstream, "the job keeps its upstream")
			if tc.fallback {
				require.Equal(t, []string{"claude-haiku-4-5"}, backupModels(), "the fallback's model")
				require.Empty(t, primaryModels(), "nothing reached the upstream in its outage")
				require.Equal(t, "claude-b", v.Response.Headers[servedByHeader])
			} else {
				require.Equal(t, []string{"claude-sonnet-4-5"}, primaryModels())
				require.Empty(t, backupModels())
				require.Equal(t, "claude", v.Response.Headers[servedByHeader])
			}
			// The idempotency key finds the same job, whoever served it.
			code, body = do(t, s.Handler(), "POST", "/v1/jobs", req)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, id, decode[jobsapi.JobView](t, body).ID)
		})
	}
}

// TestJobHeldByItsClientLimitIsNoAttempt: a client's jobs over its own
// requests_per_minute are held back in the store until its next turn,
// not sent: each succeeds with one attempt and no entry in its history,
// and the log has no rate limit in it.
func TestJobHeldByItsClientLimitIsNoAttempt(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	layer, err := admit.New(admit.Config{Clock: clk, Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic}},
		Clients: []admit.Client{{Name: "acme", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 120, BurstSeconds: 0.5}}}}})
	require.NoError(t, err)
	d := succeed()
	layer.Bind(map[string]admit.Engine{"claude": d})
	var logs bytes.Buffer
	var mu sync.Mutex
	s := newService(t, nil, d, nil, func(c *Config) {
		c.Clock = clk
		c.Admission = layer
		c.RescueInterval = -1
		c.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var ids []int64
	for i := range 3 {
		code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","idempotency_key":"k`+strconv.Itoa(i)+`","request":`+anthropicBody+`}`,
			"X-Sluice-Client", "acme")
		require.Equal(t, http.StatusAccepted, code, string(body))
		ids = append(ids, decode[jobsapi.JobView](t, body).ID)
	}
	// One every half second (a burst of one): the clock is stepped until
	// the client's next turns come.
	stepUntil(t, clk, 100*time.Millisecond, func() bool {
		for _, id := range ids {
			if !finished(t, s, id) {
				return false
			}
		}
		return true
	})
	require.GreaterOrEqual(t, clk.Now().Sub(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), time.Second,
		"the second and third waited their turns")
	for _, id := range ids {
		v := await(t, s, id)
		require.Equal(t, "succeeded", string(v.State))
		require.Equal(t, 1, v.Attempts, "the limit burns no attempt")
		require.Empty(t, v.Errors, "nothing in its history")
	}
	// The attempt line is written just after the job's result.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logs.String(), `"msg":"job attempt"`) == 3
	}, 5*time.Second, time.Millisecond, "one attempt line each")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), `"msg":"job held"`, "two of the three were held back")
	require.Contains(t, logs.String(), "client acme's requests_per_minute (120) on claude")
	require.NotContains(t, logs.String(), "rate_limited")
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// fallbackRig is a job service on a fake clock whose upstream "claude"
// (a real dispatcher against a scripted provider) falls back to
// "claude-b" (another), through the real admission layer.
type fallbackRig struct {
	s               *testService
	clk             *clock.Fake
	engine          *dispatch.Dispatcher // the primary's
	primary, backup *scriptedUpstream
	logs            *lockedWriter
}

func newFallbackRig(t *testing.T, primary func(*dispatch.Config), script ...answer) *fallbackRig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	pd, pu, _ := realEngine(t, clk, primary, script...)
	bd, bu, _ := realEngine(t, clk, func(c *dispatch.Config) { c.Name = "claude-b" }, answerOK)
	layer, err := admit.New(admit.Config{Clock: clk, Upstreams: []upcfg.Config{
		{Name: "claude", Protocol: llm.Anthropic, Fallbacks: []upcfg.Fallback{{Upstream: "claude-b"}}},
		{Name: "claude-b", Protocol: llm.Anthropic}}})
	require.NoError(t, err)
	layer.Bind(map[string]admit.Engine{"claude": pd, "claude-b": bd})
	logs := &lockedWriter{mu: &sync.Mutex{}, w: &bytes.Buffer{}}
	s := newService(t, nil, pd, nil, func(c *Config) {
		c.Clock = clk
		c.Dispatchers["claude-b"] = bd
		c.Protocols["claude-b"] = llm.Anthropic
		c.Admission = layer
		// A backoff no test waits out: a job served at once did not back off.
		c.Retry.BaseDelay, c.Retry.MaxDelay = time.Hour, time.Hour
		c.PollInterval = time.Second
		c.RescueInterval = -1
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	return &fallbackRig{s: s, clk: clk, engine: pd, primary: pu, backup: bu, logs: logs}
}

// log returns what was logged so far.
func (r *fallbackRig) log() string {
	r.logs.mu.Lock()
	defer r.logs.mu.Unlock()
	return r.logs.w.(*bytes.Buffer).String()
}

// TestFirstJobIntoANewOutageFallsBackAtOnce: the first job sent to an
// upstream that starts answering 529 (its breaker still closed) is served
// by the fallback after that one failed attempt, with no fake time
// passing (no backoff); its record names the upstream of each attempt and
// the one that served it, and the log has a line for each attempt.
func TestFirstJobIntoANewOutageFallsBackAtOnce(t *testing.T) {
	t.Parallel()
	r := newFallbackRig(t, nil, answerOverload)
	start := r.clk.Now()
	j := submit(t, r.s, `,"priority":"high"`)
	require.Eventually(t, func() bool { return finished(t, r.s, j.ID) }, 10*time.Second, time.Millisecond, "served without the clock moving")
	v := await(t, r.s, j.ID)
	require.Equal(t, jobstore.StateSucceeded, v.State)
	require.Equal(t, start, r.clk.Now(), "no fake time passed: no backoff before the fallback")
	require.EqualValues(t, 1, r.primary.calls.Load(), "one failed attempt on the upstream")
	require.EqualValues(t, 1, r.backup.calls.Load())
	require.Equal(t, 2, v.Attempts, "the failed attempt and the fallback's")
	require.Equal(t, "claude-b", v.ServedBy)
	require.Equal(t, "claude-b", v.Response.Headers[servedByHeader])
	require.Len(t, v.Errors, 1)
	require.Equal(t, jobsapi.AttemptView{Attempt: 1, Status: 529, Kind: llm.Overload.String(), Message: v.Errors[0].Message,
		Upstream: "claude", At: start}, v.Errors[0])
	require.Eventually(t, func() bool { return strings.Count(r.log(), `"msg":"job attempt"`) == 2 }, 5*time.Second, time.Millisecond)
	require.Contains(t, r.log(), `"served_by":"claude","client":"","priority":"high","outcome":"fell_back","status":529,"attempt":1`)
	require.Contains(t, r.log(), `"served_by":"claude-b","client":"","priority":"high","outcome":"success","status":200,"attempt":2`)
}

// TestJobWhosePredictedWaitMissesItsDeadlineFallsBack: with the upstream's
// quota used up (its predicted wait about 30 s), a job whose deadline is
// 10 s away is served by the fallback at once, while a job without a
// deadline waits for its upstream and is served there; whether the urgent
// job is claimed from the store (the worker's admission for the patient
// one already waiting) or handed to the idle worker at its submit.
func TestJobWhosePredictedWaitMissesItsDeadlineFallsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		patientFirst bool
	}{
		{"claimed from the backlog", true},
		{"handed off at its submit", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newFallbackRig(t, func(c *dispatch.Config) { c.Limits.RequestsPerMinute = 2 }, answerOK)
			first := submit(t, r.s, `,"priority":"high"`)
			require.Equal(t, "claude", await(t, r.s, first.ID).ServedBy, "the first uses up the quota")
			start := r.clk.Now()
			urgentBody := `,"priority":"high","deadline":"` + start.Add(10*time.Second).Format(time.RFC3339Nano) + `"`

			var patient, urgent jobsapi.JobView
			if tc.patientFirst {
				patient = submit(t, r.s, `,"priority":"high"`)
				// The worker's admission for it waits on the upstream, so
				// the next job goes to the store, not to a handoff.
				require.Eventually(t, func() bool { return r.engine.Snapshot().Queued[llm.High] == 1 }, 10*time.Second, time.Millisecond)
				urgent = submit(t, r.s, urgentBody)
			} else {
				urgent = submit(t, r.s, urgentBody)
				patient = submit(t, r.s, `,"priority":"high"`)
			}
			require.Eventually(t, func() bool { return finished(t, r.s, urgent.ID) }, 10*time.Second, time.Millisecond,
				"served without the clock moving")
			v := await(t, r.s, urgent.ID)
			require.Equal(t, jobstore.StateSucceeded, v.State)
			require.Equal(t, "claude-b", v.ServedBy, "its upstream would have made it miss its deadline")
			require.Equal(t, 1, v.Attempts)
			require.Empty(t, v.Errors)
			require.Equal(t, start, r.clk.Now(), "served without waiting")
			require.False(t, finished(t, r.s, patient.ID), "the job without a deadline waits for its upstream")

			stepUntil(t, r.clk, time.Second, func() bool { return finished(t, r.s, patient.ID) })
			require.Equal(t, "claude", await(t, r.s, patient.ID).ServedBy)
			require.EqualValues(t, 2, r.primary.calls.Load())
			require.EqualValues(t, 1, r.backup.calls.Load())
		})
	}
}
