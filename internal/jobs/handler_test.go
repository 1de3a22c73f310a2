package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	base := func() Config {
		return Config{Store: st, Dispatchers: map[string]Dispatcher{"a": succeed()}, Protocols: map[string]llm.Protocol{"a": llm.Anthropic}}
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"no store", func(c *Config) { c.Store = nil }, "Store"},
		{"no dispatchers", func(c *Config) { c.Dispatchers = nil }, "Dispatchers"},
		{"missing protocol", func(c *Config) { c.Protocols = nil }, "Protocols[a]"},
		{"bad protocol", func(c *Config) { c.Protocols["a"] = "gemini" }, "Protocols[a]"},
		{"heartbeat too slow", func(c *Config) { c.LeaseFor, c.HeartbeatEvery = time.Second, 2*time.Second }, "HeartbeatEvery"},
		{"negative lease", func(c *Config) { c.LeaseFor = -time.Second }, "lease_for: must be >= 0"},
		{"short lease", func(c *Config) { c.LeaseFor = 500 * time.Millisecond }, "lease_for: must be at least 1s"},
		{"in flight", func(c *Config) { c.MaxInFlightPerUpstream = -1 }, "max_in_flight: must be >= 0"},
		{"attempts", func(c *Config) { c.MaxAttempts = 1000 }, "max_attempts: must be at most 100"},
		{"retry delays", func(c *Config) { c.Retry.BaseDelay, c.Retry.MaxDelay = time.Minute, time.Second }, "retry.max_delay: must be >= retry.base_delay"},
		{"webhook retry window", func(c *Config) { c.Webhooks.RetryFor = -time.Hour }, "webhooks.retry_for: must be >= 0"},
		{"webhook delays", func(c *Config) { c.Webhooks.BaseDelay, c.Webhooks.MaxDelay = time.Minute, time.Second }, "webhooks.max_delay: must be >= webhooks.base_delay"},
		{"webhook concurrency", func(c *Config) { c.WebhookConcurrency = -1 }, "WebhookConcurrency"},
		{"webhook secret", func(c *Config) { c.WebhookSecret = "whsec_not base64!" }, "webhook_secret: "},
		{"webhook allow", func(c *Config) { c.Webhooks.Allow = []string{"10.0.0.0/33"} }, "webhooks.allow[0]: "},
		{"retention", func(c *Config) { c.Retention.Dead = -time.Hour }, "retention.dead: must be >= 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := base()
			tc.edit(&c)
			s, err := New(c)
			if tc.want == "" {
				require.NoError(t, err)
				require.NoError(t, s.Stop(context.Background()), "Stop before Start")
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestWithDefaultsIsPure(t *testing.T) {
	t.Parallel()
	c := Config{Settings: Settings{LeaseFor: 9 * time.Second}}
	d := c.WithDefaults()
	require.Zero(t, c.HeartbeatEvery)
	require.Equal(t, 3*time.Second, d.HeartbeatEvery)
	require.Equal(t, 4500*time.Millisecond, d.RescueInterval)
	require.Equal(t, MaxInFlightPerUpstreamDefault, d.MaxInFlightPerUpstream)
}

func TestSubmitRunsAndReturnsResponse(t *testing.T) {
	t.Parallel()
	d, up, _ := realEngine(t, clock.Real(), nil, answerOK) // the engine reads the usage
	s := newService(t, nil, d, nil, nil)
	j := submit(t, s, `,"priority":"high","max_attempts":3`)
	require.Contains(t, []jobstore.State{jobstore.StateQueued, jobstore.StateRunning}, j.State, "running when handed to an idle worker")
	require.Equal(t, "high", j.Priority)
	require.Equal(t, 3, j.MaxAttempts)
	v := await(t, s, j.ID)
	require.Equal(t, jobstore.StateSucceeded, v.State)
	require.NotNil(t, v.Response)
	require.Equal(t, 200, v.Response.Status)
	require.Equal(t, llm.Usage{InputTokens: 7, OutputTokens: 3}, v.Response.Usage)
	require.Equal(t, "application/json", v.Response.Headers["Content-Type"])
	got, err := json.Marshal(v.Response.Body)
	require.NoError(t, err)
	require.JSONEq(t, okMessage, string(got))
	require.EqualValues(t, 1, up.calls.Load())
}

func TestSubmitBadInput(t *testing.T) {
	t.Parallel()
	s := newService(t, nil, succeed(), nil, func(c *Config) { c.MaxBodyBytes = 4096 })
	cases := []struct {
		name, body string
		hdr        []string
		status     int
		want       string
	}{
		{"not json", `{`, nil, 400, "JSON job"},
		{"array", `[]`, nil, 400, "JSON job"},
		{"unknown field", `{"upstream":"claude","request":{},"colour":1}`, nil, 400, "colour"},
		{"two values", `{"upstream":"claude","request":` + anthropicBody + `}{}`, nil, 400, "one JSON job"},
		{"no upstream", `{"request":` + anthropicBody + `}`, nil, 400, "upstream is required"},
		{"unknown upstream", `{"upstream":"nope","request":` + anthropicBody + `}`, nil, 400, "unknown upstream"},
		{"no request", `{"upstream":"claude"}`, nil, 400, "request is required"},
		{"request not object", `{"upstream":"claude","request":"hi"}`, nil, 400, "JSON object"},
		{"request invalid for provider", `{"upstream":"claude","request":{"model":"x"}}`, nil, 400, "request"},
		{"bad priority", `{"upstream":"claude","request":` + anthropicBody + `,"priority":"urgent"}`, nil, 400, "priority"},
		{"bad deadline", `{"upstream":"claude","request":` + anthropicBody + `,"deadline":"tomorrow"}`, nil, 400, "RFC 3339"},
		{"past deadline", `{"upstream":"claude","request":` + anthropicBody + `,"deadline":"2001-01-01T00:00:00Z"}`, nil, 400, "past"},
		{"attempts", `{"upstream":"claude","request":` + anthropicBody + `,"max_attempts":1000}`, nil, 400, "max_attempts"},
		{"negative attempts", `{"upstream":"claude","request":` + anthropicBody + `,"max_attempts":-1}`, nil, 400, "max_attempts"},
		{"webhook", `{"upstream":"claude","request":` + anthropicBody + `,"webhook_url":"ftp://x"}`, nil, 400, "webhook_url"},
		{"keys differ", `{"upstream":"claude","request":` + anthropicBody + `,"idempotency_key":"a"}`, []string{"Idempotency-Key", "b"}, 400, "differ"},
		{"key too long", `{"upstream":"claude","request":` + anthropicBody + `}`, []string{"Idempotency-Key", strings.Repeat("k", 300)}, 400, "longer"},
		{"too large", `{"upstream":"claude","request":{"pad":"` + strings.Repeat("x", 5000) + `"}}`, nil, 413, "exceeds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, s.Handler(), "POST", "/v1/jobs", tc.body, tc.hdr...)
			require.Equal(t, tc.status, code, string(body))
			e := decode[APIError](t, body)
			require.Equal(t, "error", e.Type)
			require.Contains(t, e.Error.Message, tc.want)
		})
	}
	code, body := do(t, s.Handler(), "GET", "/v1/jobs", "")
	require.Equal(t, 200, code)
	require.Empty(t, decode[ListResponse](t, body).Data, "nothing was queued")
}

func TestRoutesBadInput(t *testing.T) {
	t.Parallel()
	s := newService(t, nil, succeed(), nil, nil)
	j := submit(t, s, "")
	await(t, s, j.ID)
	cases := []struct {
		method, target, body string
		status               int
		want                 string
	}{
		{"GET", "/v1/jobs/999", "", 404, "no job 999"},
		{"GET", "/v1/jobs/abc", "", 404, "no job"},
		{"GET", "/v1/jobs/-3", "", 404, "no job"},
		{"GET", "/v1/jobs/1?wait=soon", "", 400, "wait"},
		{"GET", "/v1/jobs/1?wait=-5s", "", 400, "negative"},
		{"DELETE", "/v1/jobs/999", "", 404, "no job"},
		{"DELETE", "/v1/jobs/1", "", 409, "already finished"},
		{"POST", "/v1/jobs/1/retry", "", 409, "only dead jobs"},
		{"POST", "/v1/jobs/999/retry", "", 404, "no job"},
		{"POST", "/v1/jobs/retry", "", 400, "JSON"},
		{"POST", "/v1/jobs/retry", `{}`, 400, "name ids"},
		{"POST", "/v1/jobs/retry", `{"all":true} {"all":true}`, 400, "nothing after it"},
		{"POST", "/v1/jobs/retry", `{"upstream":"nope"}`, 400, "unknown upstream"},
		{"GET", "/v1/jobs?state=lost", "", 400, "state"},
		{"GET", "/v1/jobs?upstream=nope", "", 400, "unknown upstream"},
		{"GET", "/v1/jobs?cursor=x", "", 400, "cursor"},
		{"GET", "/v1/jobs?limit=0", "", 400, "limit"},
		{"GET", "/v1/jobs?limit=5000", "", 400, "limit"},
		{"POST", "/v1/upstreams/nope/pause", "", 400, "unknown upstream"},
		{"POST", "/v1/upstreams/claude/explode", "", 404, "pause or resume"},
		{"GET", "/v1/nothing", "", 404, "no route"},
		{"GET", "/v1/batches/batch_nope", "", 404, "no batch"},
		{"GET", "/v1/batches/batch_nope/results", "", 404, "no batch"},
		{"POST", "/v1/batches/batch_nope/cancel", "", 404, "no batch"},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, s.Handler(), tc.method, tc.target, tc.body)
			require.Equal(t, tc.status, code, string(body))
			require.Contains(t, decode[APIError](t, body).Error.Message, tc.want)
		})
	}
}

func TestIdempotencyNeverCallsTwice(t *testing.T) {
	t.Parallel()
	d := succeed()
	s := newService(t, nil, d, nil, nil)
	first := submit(t, s, `,"idempotency_key":"k1"`)
	code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+`}`, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, first.ID, decode[JobView](t, body).ID)
	await(t, s, first.ID)
	code, body = do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+`,"idempotency_key":"k1"}`)
	require.Equal(t, http.StatusOK, code)
	again := decode[JobView](t, body)
	require.Equal(t, jobstore.StateSucceeded, again.State)
	require.NotNil(t, again.Response, "a known key answers with the stored response")
	require.Equal(t, 1, d.Calls())
}

func TestLongPollReturnsWhenJobFinishes(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		entered <- struct{}{}
		<-release
		return reply(200, okMessage), nil
	}}
	s := newService(t, nil, d, nil, nil)
	j := submit(t, s, "")
	<-entered
	code, body := do(t, s.Handler(), "GET", "/v1/jobs/"+formatID(j.ID)+"?wait=0", "")
	require.Equal(t, 200, code)
	require.Equal(t, jobstore.StateRunning, decode[JobView](t, body).State)
	got := make(chan JobView)
	go func() {
		_, body := do(t, s.Handler(), "GET", "/v1/jobs/"+formatID(j.ID)+"?wait=30s", "")
		var v JobView
		_ = json.Unmarshal(body, &v)
		got <- v
	}()
	close(release)
	v := <-got
	require.Equal(t, jobstore.StateSucceeded, v.State)
}

func TestCancelAbortsRunningCall(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	aborted := make(chan error, 1)
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		aborted <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}}
	s := newService(t, nil, d, nil, nil)
	j := submit(t, s, "")
	<-entered
	code, body := do(t, s.Handler(), "DELETE", "/v1/jobs/"+formatID(j.ID), "")
	require.Equal(t, 200, code, string(body))
	require.Equal(t, jobstore.StateCanceled, decode[JobView](t, body).State)
	require.ErrorIs(t, <-aborted, errJobCanceled, "the upstream call's context is canceled")
	v := await(t, s, j.ID)
	require.Equal(t, jobstore.StateCanceled, v.State)
	require.Equal(t, "canceled", v.Error.Type)
	code, _ = do(t, s.Handler(), "DELETE", "/v1/jobs/"+formatID(j.ID), "")
	require.Equal(t, 200, code, "canceling twice is a no-op")
}

func TestListPaginationPauseAndRetry(t *testing.T) {
	t.Parallel()
	bad := &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return reply(400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`), nil
	}}
	s := newService(t, nil, bad, nil, func(c *Config) { c.Owner = "manual" })
	h := s.Handler()
	code, _ := do(t, h, "POST", "/v1/upstreams/claude/pause", "")
	require.Equal(t, 200, code)
	code, body := do(t, h, "GET", "/v1/upstreams/paused", "")
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"paused":["claude"]}`, string(body))
	var ids []int64
	for range 5 {
		ids = append(ids, submit(t, s, "").ID)
	}
	var seen []int64
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		code, body := do(t, h, "GET", "/v1/jobs?upstream=claude&state=queued&limit=2&cursor="+cursor, "")
		require.Equal(t, 200, code, string(body))
		page := decode[ListResponse](t, body)
		for _, v := range page.Data {
			seen = append(seen, v.ID)
		}
		if !page.HasMore {
			break
		}
		cursor = page.NextCursor
	}
	require.Equal(t, ids, seen)
	require.NoError(t, s.Start(context.Background()))
	code, _ = do(t, h, "POST", "/v1/upstreams/claude/resume", "")
	require.Equal(t, 200, code)
	for _, id := range ids {
		v := await(t, s, id)
		require.Equal(t, jobstore.StateDead, v.State)
		require.Equal(t, "invalid_request_error", v.Error.Type)
		require.Equal(t, 400, v.Error.Status)
	}
	require.Equal(t, 5, bad.Calls(), "terminal errors are not retried")
	code, body = do(t, h, "POST", "/v1/jobs/"+formatID(ids[0])+"/retry", "")
	require.Equal(t, 200, code, string(body))
	require.Equal(t, jobstore.StateDead, await(t, s, ids[0]).State)
	code, body = do(t, h, "POST", "/v1/jobs/retry", `{"upstream":"claude"}`)
	require.Equal(t, 200, code, string(body))
	require.JSONEq(t, `{"requeued":5}`, string(body))
	for _, id := range ids {
		await(t, s, id)
	}
	require.Equal(t, 11, bad.Calls())
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	rate := &llm.Outcome{Kind: llm.Rate, Status: 429, RetryAfter: time.Hour, HasRetryAfter: true}
	overload := &llm.Outcome{Kind: llm.Overload, Status: 529, RetryAfter: time.Hour, HasRetryAfter: true}
	cases := []struct {
		name     string
		resp     func() (*dispatch.Response, error)
		state    jobstore.State
		attempts int
		errType  string
	}{
		{"rate burns and waits for its hint", func() (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 429, Message: "rate limited", RetryAfter: time.Hour, Attempts: 1, Last: rate}
		}, jobstore.StateQueued, 1, ""},
		{"not admitted reschedules without burning", func() (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrNotAdmitted, Status: 429, Message: "does not fit", RetryAfter: time.Hour}
		}, jobstore.StateQueued, 0, ""},
		{"overload burns and backs off", func() (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrCallFailed, Status: 529, Message: "overloaded", Attempts: 1, Last: overload}
		}, jobstore.StateQueued, 1, ""},
		{"too large is terminal", func() (*dispatch.Response, error) {
			return nil, &dispatch.Error{Reason: dispatch.ErrTooLarge, Status: 413, Message: "too large"}
		}, jobstore.StateDead, 1, "invalid_request_error"},
		{"quota is terminal", func() (*dispatch.Response, error) {
			return reply(429, `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits","details":{"error_code":"enforced_spend_limit_reached"}}}`), nil
		}, jobstore.StateDead, 1, "rate_limit_error"},
		{"local failure retries", func() (*dispatch.Response, error) { return nil, errors.New("boom") }, jobstore.StateQueued, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) { return tc.resp() }}
			st := openStore(t)
			s := newService(t, st, d, nil, func(c *Config) { c.Retry.BaseDelay, c.Retry.MaxDelay = time.Hour, time.Hour })
			j := submit(t, s, "")
			require.Eventually(t, func() bool { return d.Calls() == 1 }, 10*time.Second, time.Millisecond)
			var got *jobstore.Job
			require.Eventually(t, func() bool {
				var err error
				got, err = st.Get(context.Background(), j.ID)
				return err == nil && got.State != jobstore.StateRunning
			}, 10*time.Second, time.Millisecond)
			require.Equal(t, tc.state, got.State)
			require.Equal(t, tc.attempts, got.Attempts)
			if tc.state == jobstore.StateQueued && tc.name != "local failure retries" {
				require.True(t, got.AvailableAt.After(time.Now().Add(30*time.Minute)), "requeued for later: %v", got.AvailableAt)
			}
			if tc.errType != "" {
				require.Equal(t, tc.errType, s.view(got, false).Error.Type)
			}
			require.Len(t, got.Errors, got.Attempts, "one history entry per call, none for a call never sent")
		})
	}
}

func TestStopHandsBackLeases(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
	st := openStore(t)
	s := newService(t, st, d, nil, nil)
	j := submit(t, s, "")
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: abort at once
	require.NoError(t, s.Stop(ctx))
	got, err := st.Get(context.Background(), j.ID)
	require.NoError(t, err)
	require.Equal(t, jobstore.StateQueued, got.State, "the lease was handed back")
	require.Zero(t, got.Attempts, "no attempt burnt")
	require.NoError(t, s.Stop(context.Background()), "Stop is idempotent")
	require.ErrorIs(t, s.Start(context.Background()), lifecycle.ErrStopped)
}

// claimCounter counts claude's Claim calls (other upstreams' workers claim
// when they start, whenever they are scheduled) and keeps claude's last
// Handoff.
type claimCounter struct {
	jobstore.Store
	claims   atomic.Int64
	backlogs atomic.Int64 // claude's backlog reads: one per poll
	handoff  atomic.Pointer[jobstore.Handoff]
}

func (c *claimCounter) Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error) {
	if upstream == "claude" {
		c.backlogs.Add(1)
	}
	return c.Store.Backlog(ctx, upstream, now, limit)
}

// waitPolls returns once claude's worker has read the backlog n more
// times: n polls have passed.
func (c *claimCounter) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := c.backlogs.Load() + n
	require.Eventually(t, func() bool { return c.backlogs.Load() >= target }, 10*time.Second, time.Millisecond, "%d polls", n)
}

func (c *claimCounter) Handoff(p jobstore.HandoffParams) (*jobstore.Handoff, error) {
	h, err := c.Store.Handoff(p)
	if err == nil && p.Upstream == "claude" {
		c.handoff.Store(h)
	}
	return h, err
}

func (c *claimCounter) Claim(ctx context.Context, p jobstore.ClaimParams) ([]*jobstore.Job, error) {
	if p.Upstream == "claude" {
		c.claims.Add(1)
	}
	return c.Store.Claim(ctx, p)
}

// TestIdleWorkerTakesSubmitsWithoutClaiming: jobs submitted while the
// upstream's worker is idle are leased in the insert and run without a
// claim; jobs submitted while it is busy queue and are claimed later.
func TestIdleWorkerTakesSubmitsWithoutClaiming(t *testing.T) {
	t.Parallel()
	st := &claimCounter{Store: openStore(t)}
	release := make(chan struct{})
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return reply(200, okMessage), nil
	}}
	s := newService(t, st, d, nil, func(c *Config) { c.PollInterval = time.Hour; c.MaxInFlightPerUpstream = 2 })
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the service stops, even when the test fails
	require.Eventually(t, func() bool {
		h := st.handoff.Load()
		return h != nil && h.Offered() == 2
	}, 10*time.Second, time.Millisecond, "the idle worker offers its two slots")
	before := st.claims.Load()
	a, b := submit(t, s, ""), submit(t, s, "")
	require.Equal(t, jobstore.StateRunning, a.State, "handed off at submit")
	require.Equal(t, jobstore.StateRunning, b.State)
	require.Equal(t, before, st.claims.Load(), "no claim for handed-off jobs")
	c := submit(t, s, "")
	require.Equal(t, jobstore.StateQueued, c.State, "both slots are busy")
	unblock()
	for _, id := range []int64{a.ID, b.ID, c.ID} {
		require.Equal(t, jobstore.StateSucceeded, await(t, s, id).State)
	}
	require.Greater(t, st.claims.Load(), before, "the queued job was claimed")
	require.Equal(t, 3, d.Calls())
}

// TestIdleWorkerDoesNotClaim: an idle worker reads the backlog on every
// poll but never claims while no class has work: there is nothing to be
// admitted for. A job submitted meanwhile is handed off at once.
func TestIdleWorkerDoesNotClaim(t *testing.T) {
	t.Parallel()
	st := &claimCounter{Store: openStore(t)}
	d := succeed()
	s := newService(t, st, d, nil, func(c *Config) {
		c.PollInterval = 5 * time.Millisecond
		c.MaxInFlightPerUpstream = 4
	})
	require.Eventually(t, func() bool {
		h := st.handoff.Load()
		return h != nil && h.Offered() == 4
	}, 10*time.Second, time.Millisecond, "the idle worker offers its four slots")
	st.waitPolls(t, 10)
	require.Zero(t, st.claims.Load(), "no claim without a backlog")
	j := submit(t, s, "")
	require.Equal(t, jobstore.StateRunning, j.State, "handed off")
	require.Equal(t, jobstore.StateSucceeded, await(t, s, j.ID).State)
	require.Zero(t, st.claims.Load())
}
