package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobsapi"
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
	require.Equal(t, jobstore.StateCanceled, decode[jobsapi.JobView](t, body).State)
	require.ErrorIs(t, <-aborted, errJobCanceled, "the upstream call's context is canceled")
	v := await(t, s, j.ID)
	require.Equal(t, jobstore.StateCanceled, v.State)
	require.Equal(t, "canceled", v.Error.Type)
	code, _ = do(t, s.Handler(), "DELETE", "/v1/jobs/"+formatID(j.ID), "")
	require.Equal(t, 200, code, "canceling twice is a no-op")
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
				require.Equal(t, tc.errType, jobsapi.NewJobView(got, false).Error.Type)
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
