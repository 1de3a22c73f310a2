package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const okMessage = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}`

const okStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

const errorBeforeContent = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
	"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

// reply is one scripted upstream answer.
type reply struct {
	status int
	header map[string]string
	body   string
}

func ok() reply { return reply{status: 200, body: okMessage} }

// upstream is an httptest server answering from a script (the last entry
// repeats) and recording the requests it got.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	script  []reply
	calls   atomic.Int32
	headers []http.Header
}

func newUpstream(t testing.TB, script ...reply) *upstream {
	t.Helper()
	u := &upstream{script: script}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := int(u.calls.Add(1)) - 1
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		rep := u.script[min(n, len(u.script)-1)]
		u.mu.Unlock()
		ct := "application/json"
		if strings.HasPrefix(rep.body, "event:") {
			ct = "text/event-stream"
		}
		w.Header().Set("Content-Type", ct)
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(u.Close)
	return u
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type recorder struct {
	dispatch.NopObserver
	mu       sync.Mutex
	shed     []error
	retried  []llm.OutcomeKind
	breaker  []string
	admitted int
}

func (r *recorder) Shed(_ llm.Priority, reason error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shed = append(r.shed, reason)
}

func (r *recorder) Retried(c llm.OutcomeKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retried = append(r.retried, c)
}

func (r *recorder) BreakerStateChanged(from, to flow.BreakerState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breaker = append(r.breaker, from.String()+">"+to.String())
}

func (r *recorder) Admitted(llm.Priority, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted++
}

// setHeadroom sets the classes' headroom, critical first.
func setHeadroom(c *dispatch.Config, critical, high, normal, low float64) {
	c.Classes.Critical.Headroom, c.Classes.High.Headroom = critical, high
	c.Classes.Normal.Headroom, c.Classes.Low.Headroom = normal, low
}

func start(t *testing.T, u *upstream, mod func(*dispatch.Config)) (*dispatch.Dispatcher, *clock.Fake, *recorder) {
	t.Helper()
	fc := clock.NewFake(t0)
	rec := &recorder{}
	cfg := dispatch.Config{
		Config: upcfg.Config{
			Name:     "test",
			Protocol: llm.Anthropic,
			BaseURL:  u.URL,
			APIKey:   "sk-upstream",
			// The tests check exact bucket math; the allowance and the
			// adaptive margin have their own tests in internal/flow.
			JitterAllowance: -1,
			MaxSafetyMargin: upcfg.SafetyMarginDefault,
			// Nor the room for bursts (burst_room_test.go).
			BurstRoom: -1,
		},
		Clock:    fc,
		Observer: rec,
		Rand:     rand.New(rand.NewPCG(1, 2)),
	}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dispatch.New(cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return d, fc, rec
}

func request() *dispatch.Request {
	return &dispatch.Request{
		Method: http.MethodPost,
		Path:   "/v1/messages",
		// As the front door leaves it: credentials already removed.
		Header:   http.Header{"Anthropic-Beta": {"tools-2024-04-04"}},
		Body:     []byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`),
		Cost:     provider.Cost{Model: "claude-sonnet-4-5", InputTokens: 50, OutputTokens: 100},
		Priority: llm.Normal,
	}
}

type result struct {
	resp *dispatch.Response
	body string
	err  error
}

func doAsync(ctx context.Context, d *dispatch.Dispatcher, r *dispatch.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := d.Do(ctx, r)
		res := result{resp: resp, err: err}
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			res.body = string(b)
			res.err = errors.Join(rerr, resp.Body.Close())
		}
		ch <- res
	}()
	return ch
}

func TestSuccessReconcilesAndForwardsUpstreamKey(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, rec := start(t, u, func(c *dispatch.Config) { c.Limits.InputTokensPerMinute = 60000 })
	res := <-doAsync(context.Background(), d, request())
	require.NoError(t, res.err)
	require.Equal(t, 200, res.resp.StatusCode)
	require.Equal(t, 1, res.resp.Attempts)
	require.JSONEq(t, okMessage, res.body)

	h := u.headers[0]
	require.Equal(t, "sk-upstream", h.Get("X-Api-Key"))
	require.Equal(t, "2023-06-01", h.Get("Anthropic-Version"))
	require.Empty(t, h.Get("Authorization"))

	s := d.Snapshot()
	require.Equal(t, 0, s.InFlight)
	// Depth 5 s of 58800/min = 4900; reserved 50, actual 10: level 4890.
	require.InDelta(t, 4890, s.Buckets[flow.InputTokens].Level, 0.5)
	require.Equal(t, 1, rec.admitted)
}

func TestOpenAIUsesBearerKey(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply{status: 200, body: `{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}`})
	d, _, _ := start(t, u, func(c *dispatch.Config) { c.Protocol = llm.OpenAI })
	r := request()
	r.Path = "/v1/chat/completions"
	res := <-doAsync(context.Background(), d, r)
	require.NoError(t, res.err)
	require.Equal(t, "Bearer sk-upstream", u.headers[0].Get("Authorization"))
	require.Empty(t, u.headers[0].Get("X-Api-Key"))
}

func TestTerminalAnswersPassThrough(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rep    reply
		status int
	}{
		{"bad request", reply{status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`}, 400},
		{"should-retry false on 529", reply{status: 529, header: map[string]string{"x-should-retry": "false"}, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, 529},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, tt.rep)
			d, _, _ := start(t, u, nil)
			res := <-doAsync(context.Background(), d, request())
			require.NoError(t, res.err)
			require.Equal(t, tt.status, res.resp.StatusCode)
			require.Equal(t, 1, res.resp.Attempts)
			require.Equal(t, tt.rep.body, res.body)
			require.EqualValues(t, 1, u.calls.Load())
		})
	}
}

func TestRateLimitPausesWholeUpstreamAndBurnsAttempts(t *testing.T) {
	t.Parallel()
	rate := reply{status: 429, header: map[string]string{"retry-after": "2"}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`}
	u := newUpstream(t, rate, rate, ok())
	d, fc, rec := start(t, u, func(c *dispatch.Config) {
		c.Retry.MaxAttempts = 3
		c.Limits.MaxConcurrency = 1 // one at a time, so the order is visible
	})

	first := doAsync(context.Background(), d, request())
	// first: 429 → paused ~2 s. Wait for: first's deadline timer + the loop's pause timer.
	require.True(t, fc.WaitForTimers(2, 5*time.Second))
	require.EqualValues(t, 1, u.calls.Load())

	second := doAsync(context.Background(), d, request())
	require.True(t, fc.WaitForTimers(3, 5*time.Second)) // second's deadline timer
	require.EqualValues(t, 1, u.calls.Load(), "the whole upstream is paused")

	stepUntil(t, fc, 3, func() bool { return u.calls.Load() == 2 }) // hint + at most 250ms jitter
	// first (kept its place) went first and got the second 429; pause again.
	require.EqualValues(t, 2, u.calls.Load())
	stepUntil(t, fc, 2, func() bool { return u.calls.Load() == 4 })

	r1, r2 := <-first, <-second
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, 3, r1.resp.Attempts, "two RATE answers burnt two of the three attempts")
	require.Equal(t, 1, r2.resp.Attempts)
	require.Equal(t, []llm.OutcomeKind{llm.Rate, llm.Rate}, rec.retried)
}

func TestOverloadRetriesUntilExhausted(t *testing.T) {
	t.Parallel()
	overloaded := reply{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	u := newUpstream(t, overloaded)
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Retry.MaxAttempts = 3
		c.Breaker.ConsecutiveFailures = 100
		c.Breaker.MinRequests = 100
	})
	ch := doAsync(context.Background(), d, request())
	for i := 1; i < 3; i++ {
		require.Eventually(t, func() bool { return u.calls.Load() == int32(i) }, 5*time.Second, time.Millisecond)
		require.True(t, fc.WaitForTimers(1, 5*time.Second)) // the backoff sleep
		fc.Advance(10 * time.Second)
	}
	res := <-ch
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.ErrorIs(t, res.err, dispatch.ErrRetriesExhausted)
	require.Equal(t, 529, de.Status)
	require.Equal(t, "overloaded_error", de.Type)
	require.Equal(t, 3, de.Attempts)
	require.LessOrEqual(t, de.RetryAfter, dispatch.MaxClientRetryAfter)
	require.EqualValues(t, 3, u.calls.Load())
}

func TestStreamErrorBeforeContentIsRetriedInvisibly(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply{status: 200, body: errorBeforeContent}, reply{status: 200, body: okStream})
	d, fc, _ := start(t, u, func(c *dispatch.Config) { c.Limits.OutputTokensPerMinute = 60000 })
	ch := doAsync(context.Background(), d, request())
	require.Eventually(t, func() bool { return u.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.True(t, fc.WaitForTimers(1, 5*time.Second)) // the backoff sleep
	fc.Advance(10 * time.Second)
	res := <-ch
	require.NoError(t, res.err)
	require.Equal(t, okStream, res.body, "the client sees only the good stream, read-ahead replayed")
	require.Equal(t, 2, res.resp.Attempts)
	// Output reserved 100, stream reported 7 → refunded 93 of the 100.
	lvl := d.Snapshot().Buckets[flow.OutputTokens].Level
	require.InDelta(t, 4900-7, lvl, 1)
}

func TestMidStreamErrorAfterContentPassesThrough(t *testing.T) {
	t.Parallel()
	broken := strings.Replace(okStream, "event: message_delta", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\nevent: message_delta", 1)
	u := newUpstream(t, reply{status: 200, body: broken})
	d, _, _ := start(t, u, nil)
	res := <-doAsync(context.Background(), d, request())
	require.NoError(t, res.err)
	require.Equal(t, broken, res.body)
	require.Equal(t, 1, res.resp.Attempts)
}

func TestBreakerOpensAndQueuedRequestsWaitThenSucceed(t *testing.T) {
	t.Parallel()
	fail := reply{status: 500, body: `{"type":"error","error":{"type":"api_error","message":"boom"}}`}
	u := newUpstream(t, fail, fail, ok())
	d, fc, rec := start(t, u, func(c *dispatch.Config) {
		c.Breaker.ConsecutiveFailures = 2
		c.Breaker.OpenTimeout = 4 * time.Second
		c.Retry.MaxAttempts = 5
	})
	ch := doAsync(context.Background(), d, request())
	require.Eventually(t, func() bool { return u.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(time.Second) // past the first backoff (≤ 0.5 s)
	require.Eventually(t, func() bool { return u.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	// Breaker open now; the request backs off, goes back in line and waits.
	require.Eventually(t, func() bool { return d.Snapshot().Breaker == flow.Open }, 5*time.Second, time.Millisecond)
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(time.Second)                             // past the second backoff: back in the queue
	require.True(t, fc.WaitForTimers(2, 5*time.Second)) // deadline + breaker wait
	require.EqualValues(t, 2, u.calls.Load(), "nothing is sent while the breaker is open")
	require.Equal(t, 1, d.Snapshot().Queued[llm.Normal])
	fc.Advance(5 * time.Second) // open period (≤ 125% of 4 s) ends: half-open probe
	res := <-ch
	require.NoError(t, res.err)
	require.Equal(t, 3, res.resp.Attempts)
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.breaker) == 2
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, []string{"closed>open", "open>half_open"}, rec.breaker)
}

func TestShedWhenPredictedWaitExceedsDeadline(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, rec := start(t, u, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 60
		setHeadroom(c, -1, -1, -1, -1) // exact refill arithmetic below
	})
	d.Snapshot()
	// Drain the request bucket: depth 5 s × 0.98/s ≈ 4.9 requests.
	for i := range 4 {
		res := <-doAsync(context.Background(), d, request())
		require.NoError(t, res.err, i)
	}
	r := request()
	r.Deadline = fc.Now().Add(500 * time.Millisecond)
	first := doAsync(context.Background(), d, r) // level 0.9: needs ~0.1 s, fits its deadline
	require.True(t, fc.WaitForTimers(2, 5*time.Second))
	r2 := request()
	r2.Deadline = fc.Now().Add(500 * time.Millisecond)
	res := <-doAsync(context.Background(), d, r2) // behind it: needs ~1.1 s
	require.ErrorIs(t, res.err, dispatch.ErrShed)
	fc.Advance(200 * time.Millisecond) // the refill it waits for, not its deadline
	require.NoError(t, (<-first).err)
	require.Equal(t, []error{dispatch.ErrShed}, rec.shed)
}

func TestDeadlineWhileQueued(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply{status: 429, header: map[string]string{"retry-after": "30"}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"x"}}`}, ok())
	d, fc, _ := start(t, u, nil)
	// A pause of 30 s with a deadline of 10 s: RATE wait past the deadline.
	r := request()
	r.Deadline = fc.Now().Add(10 * time.Second)
	res := <-doAsync(context.Background(), d, r)
	require.ErrorIs(t, res.err, dispatch.ErrDeadline)
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.Equal(t, 429, de.Status)
	require.Equal(t, dispatch.MaxClientRetryAfter, de.RetryAfter)

	// Queued behind the pause with deadlines past it: sent once it ends.
	r2 := request()
	r2.Deadline = fc.Now().Add(100 * time.Second)
	ch := doAsync(context.Background(), d, r2)
	require.True(t, fc.WaitForTimers(2, 5*time.Second))
	r3 := request()
	r3.Deadline = fc.Now().Add(95 * time.Second)
	ch3 := doAsync(context.Background(), d, r3)
	require.True(t, fc.WaitForTimers(3, 5*time.Second))
	fc.Advance(31 * time.Second)
	require.NoError(t, recvStepping(t, fc, ch).err)
	require.NoError(t, recvStepping(t, fc, ch3).err)
}

// recvStepping waits for a result, advancing the fake clock a second at a
// time (at most 60 s) while none comes: the dispatcher may re-arm its
// timer from a reading of the clock taken just before an Advance, and then
// waits for a further step. (A single Advance once hung CI for 20 minutes.)
func recvStepping(t *testing.T, fc *clock.Fake, ch <-chan result) result {
	t.Helper()
	for range 60 {
		select {
		case res := <-ch:
			return res
		case <-time.After(50 * time.Millisecond):
			fc.Advance(time.Second)
		}
	}
	t.Fatal("no result while stepping the clock 60 s")
	return result{}
}

func TestCancelRemovesFromQueueAndStopFailsQueued(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply{status: 429, header: map[string]string{"retry-after": "60"}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"x"}}`}, ok())
	d, fc, rec := start(t, u, nil)
	ch := doAsync(context.Background(), d, request()) // 429: paused 60 s, back in line
	require.True(t, fc.WaitForTimers(2, 5*time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	ch2 := doAsync(ctx, d, request())
	require.True(t, fc.WaitForTimers(3, 5*time.Second))
	require.Equal(t, 2, d.Snapshot().Queued[llm.Normal])
	cancel()
	require.ErrorIs(t, (<-ch2).err, context.Canceled)
	require.Equal(t, 1, d.Snapshot().Queued[llm.Normal])

	require.NoError(t, d.Stop(context.Background()))
	require.NoError(t, d.Stop(context.Background()), "Stop is idempotent")
	require.ErrorIs(t, (<-ch).err, dispatch.ErrStopped)
	_, err := d.Do(context.Background(), request())
	require.ErrorIs(t, err, dispatch.ErrStopped)
	require.Contains(t, rec.shed, dispatch.ErrStopped)
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, func(c *dispatch.Config) { c.Limits.OutputTokensPerMinute = 1000 })
	r := request()
	r.Cost.OutputTokens = 5000
	_, err := d.Do(context.Background(), r)
	var de *dispatch.Error
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, dispatch.ErrTooLarge)
	require.Equal(t, 413, de.Status)
	require.Equal(t, "request_too_large", de.Type)
}

func TestConfigValidationNamesField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mod  func(*dispatch.Config)
		want string
	}{
		{func(c *dispatch.Config) { c.Name = "" }, `upstream "": name: `},
		{func(c *dispatch.Config) { c.Protocol = "gemini" }, `upstream "x": protocol: `},
		{func(c *dispatch.Config) { c.BaseURL = "api.anthropic.com" }, `upstream "x": base_url: `},
		{func(c *dispatch.Config) { c.Limits.RequestsPerMinute = -1 }, `upstream "x": limits.requests_per_minute: `},
		{func(c *dispatch.Config) { c.SafetyMargin = 1.5 }, `upstream "x": safety_margin: `},
		{func(c *dispatch.Config) { c.MinConcurrency = 100; c.Limits.MaxConcurrency = 10 }, `upstream "x": min_concurrency: `},
		{func(c *dispatch.Config) { c.Retry.MaxDelay = time.Millisecond }, `upstream "x": retry.base_delay: must be <= retry.max_delay`},
		{func(c *dispatch.Config) { c.Classes.Low.Weight = -1 }, `upstream "x": classes.low.weight: `},
		{func(c *dispatch.Config) { c.Breaker.FailureRatio = 2 }, `upstream "x": breaker.failure_ratio: `},
		{func(c *dispatch.Config) { c.Profile = "fast" }, `upstream "x": profile: `},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			cfg := dispatch.Config{Config: upcfg.Config{Name: "x", Protocol: llm.Anthropic, BaseURL: "https://api.anthropic.com"}}
			tt.mod(&cfg)
			_, err := dispatch.New(cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}
	d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "x", Protocol: llm.Anthropic, BaseURL: "https://api.anthropic.com"}})
	require.NoError(t, err)
	require.NoError(t, d.Stop(context.Background()), "Stop before Start is safe")
	require.Error(t, d.Start(context.Background()), "no Start after Stop")
	_ = fmt.Sprint(d.Snapshot())
}

// TestCriticalUsesHeadroomWhileNormalWaits: once normal traffic has drained
// the request bucket down to its headroom, a critical request is admitted
// at once while the queued normal one keeps waiting for refill.
func TestCriticalUsesHeadroomWhileNormalWaits(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 600 // 9.8/s after the margin; depth 5 s = 49
		setHeadroom(c, -1, 0.5, 0.5, 0.5)
	})
	// Headroom applies once a more urgent class is active: one critical
	// request (48 left), then normal ones may use only down to half the
	// depth (24.5): 23 go at once.
	first := request()
	first.Priority = llm.Critical
	require.NoError(t, (<-doAsync(context.Background(), d, first)).err)
	for i := range 23 {
		require.NoError(t, (<-doAsync(context.Background(), d, request())).err, i)
	}
	normal := doAsync(context.Background(), d, request())
	require.True(t, fc.WaitForTimers(2, 5*time.Second), "the normal request waits for refill (deadline + refill timers)")
	crit := request()
	crit.Priority = llm.Critical
	select {
	case res := <-doAsync(context.Background(), d, crit):
		require.NoError(t, res.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the critical request did not use the headroom")
	}
	select {
	case <-normal:
		t.Fatal("the normal request was admitted into the headroom")
	default:
	}
	// Step time (the loop re-arms its refill timer as it goes) until the
	// normal request gets its turn, well within a second of refill.
	for range 5000 {
		select {
		case res := <-normal:
			require.NoError(t, res.err)
			return
		case <-time.After(time.Millisecond):
		}
		if fc.Timers() >= 2 { // its deadline + the loop's refill timer: the loop sleeps
			fc.Advance(10 * time.Millisecond)
		}
	}
	t.Fatalf("the normal request was never admitted: %+v", d.Snapshot())
}

// TestRateLimitsExhaustAttempts: every call that reaches the provider
// counts, a rate limit included, so a request that is always rate limited
// makes exactly MaxAttempts calls.
func TestRateLimitsExhaustAttempts(t *testing.T) {
	t.Parallel()
	rate := reply{status: 429, header: map[string]string{"retry-after": "1"}, body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`}
	u := newUpstream(t, rate)
	d, fc, _ := start(t, u, func(c *dispatch.Config) { c.Retry.MaxAttempts = 2 })
	r := request()
	r.Deadline = t0.Add(time.Hour)
	ch := doAsync(context.Background(), d, r)
	res := recvStepping(t, fc, ch)
	require.ErrorIs(t, res.err, dispatch.ErrRetriesExhausted)
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.Equal(t, 2, de.Attempts)
	out, ok := de.Outcome()
	require.True(t, ok)
	require.Equal(t, llm.Rate, out.Kind)
	require.EqualValues(t, 2, u.calls.Load())
}

// TestFailedProbesDoNotBurnAttempts: during a long outage the request at
// the head of the line carries the half-open probe again and again. A
// failed probe tested the upstream, not the request: it goes back in line
// without burning an attempt, so a request whose deadline outlasts the
// outage is served once the upstream recovers (a job's probe does burn:
// see internal/jobs TestOverloadedUpstreamBoundsProviderCalls).
func TestFailedProbesDoNotBurnAttempts(t *testing.T) {
	t.Parallel()
	fail := reply{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	u := newUpstream(t, fail, fail, fail, fail, fail, fail, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Breaker.ConsecutiveFailures = 2
		c.Breaker.OpenTimeout = time.Second
		c.Breaker.HalfOpenProbes = 1
		c.Retry.MaxAttempts = 3 // two closed-state failures burn two; the four probes none
	})
	r := request()
	r.Deadline = t0.Add(time.Hour)
	ch := doAsync(context.Background(), d, r)
	for range 5000 {
		select {
		case res := <-ch:
			require.NoError(t, res.err)
			require.Equal(t, 7, res.resp.Attempts)
			require.EqualValues(t, 7, u.calls.Load())
			return
		case <-time.After(time.Millisecond):
		}
		if fc.Timers() >= 1 { // a backoff sleep, or its deadline while queued
			fc.Advance(100 * time.Millisecond)
		}
	}
	t.Fatalf("the request never finished; upstream calls %d, %+v", u.calls.Load(), d.Snapshot())
}

// stepUntil advances the fake clock in 50 ms steps, each only once at
// least `timers` timers wait (the dispatcher is asleep), until done holds.
func stepUntil(t *testing.T, fc *clock.Fake, timers int, done func() bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		if done() {
			return true
		}
		if fc.Timers() >= timers {
			fc.Advance(50 * time.Millisecond)
		}
		return false
	}, 10*time.Second, time.Millisecond, "condition never reached while stepping the clock")
}

// TestNoHeadroomWithoutUrgentTraffic: traffic of one class alone uses the
// whole bucket; the headroom is kept only while a more urgent class is
// active.
func TestNoHeadroomWithoutUrgentTraffic(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 600 // depth 49 after the margin
		setHeadroom(c, -1, 0.5, 0.5, 0.5)
	})
	for i := range 49 {
		require.NoError(t, (<-doAsync(context.Background(), d, request())).err, i)
	}
	require.Zero(t, fc.Timers(), "nothing waited")
}

// TestSlowDownCutsTheRate: OpenAI's 503 "Slow Down" pauses like a rate
// limit and also halves the upstream's refill rate, ramping back over
// SlowDownRamp; the request itself still succeeds.
func TestSlowDownCutsTheRate(t *testing.T) {
	t.Parallel()
	slow := reply{status: 503, header: map[string]string{"retry-after": "1"},
		body: `{"error":{"message":"Slow Down: A sudden increase in your request rate is impacting service reliability. Please reduce your request rate to its original level.","type":"server_error","param":null,"code":null}}`}
	u := newUpstream(t, slow, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Protocol = llm.OpenAI
		c.Limits.RequestsPerMinute = 600
	})
	require.InDelta(t, 1.0, d.Snapshot().RateScale, 1e-9)
	r := request()
	r.Path = "/v1/chat/completions"
	ch := doAsync(context.Background(), d, r)
	require.Eventually(t, func() bool { return u.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return d.Snapshot().RateScale < 0.51 }, 5*time.Second, time.Millisecond)
	stepUntil(t, fc, 2, func() bool { return u.calls.Load() == 2 })
	res := <-ch
	require.NoError(t, res.err)
	require.Equal(t, 2, res.resp.Attempts)
	require.Greater(t, d.Snapshot().RateScale, 0.5, "ramping back")
	require.Less(t, d.Snapshot().RateScale, 0.51, "slowly: 15 minutes to full rate")
}
