package dispatch_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// openBreaker sends one request that fails twice against an upstream that
// always answers 529, with a breaker that opens on one failure and stays
// open for a minute, and returns when the breaker is open.
func openBreaker(t *testing.T, p llm.Protocol) (*dispatch.Dispatcher, *upstream, func() time.Time) {
	t.Helper()
	u := newUpstream(t, overloaded)
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Protocol = p
		c.Breaker.ConsecutiveFailures = 1
		c.Breaker.OpenTimeout = time.Minute
		c.Retry.MaxAttempts = 1
	})
	r := request()
	res := <-doAsync(context.Background(), d, r)
	require.ErrorIs(t, res.err, dispatch.ErrRetriesExhausted)
	require.Equal(t, flow.Open, d.Snapshot().Breaker)
	return d, u, fc.Now
}

// TestOpenBreakerAnswersAtOnceWhenTheDeadlineCannotBeMet: a request whose
// deadline ends before the breaker's next probe is answered at once (no
// clock advance), in the protocol's overloaded shape, naming the cause.
func TestOpenBreakerAnswersAtOnceWhenTheDeadlineCannotBeMet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p      llm.Protocol
		status int
		typ    string
	}{
		{llm.Anthropic, 529, "overloaded_error"},
		{llm.OpenAI, http.StatusServiceUnavailable, "server_error"},
	} {
		t.Run(string(tt.p), func(t *testing.T) {
			t.Parallel()
			d, u, now := openBreaker(t, tt.p)
			calls := u.calls.Load()
			r := request()
			r.Deadline = now().Add(6 * time.Second) // the probe is ≥ 45 s away
			res := <-doAsync(context.Background(), d, r)
			require.ErrorIs(t, res.err, dispatch.ErrUnavailable)
			var de *dispatch.Error
			require.ErrorAs(t, res.err, &de)
			require.Equal(t, tt.status, de.Status)
			require.Equal(t, tt.typ, de.Type)
			require.Contains(t, de.Message, "circuit breaker open since")
			require.Contains(t, de.Message, "next probe in")
			require.GreaterOrEqual(t, de.RetryAfter, 45*time.Second, "retry-after points at the next probe")
			require.False(t, de.OutageSince.IsZero())
			require.Zero(t, de.QueueWait, "answered without waiting")
			require.Equal(t, calls, u.calls.Load(), "nothing was sent")
		})
	}
}

// TestQueuedRequestsAnsweredWhenTheBreakerOpens: requests already queued
// when the breaker opens are answered at once if their deadline ends before
// its next probe; those that can outlast it keep waiting.
func TestQueuedRequestsAnsweredWhenTheBreakerOpens(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, overloaded)
	gate := make(chan struct{})
	inner := u.Config.Handler
	u.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u.calls.Load() == 0 {
			<-gate // the first call is held until the others are queued
		}
		inner.ServeHTTP(w, r)
	})
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Limits.MaxConcurrency = 1
		c.MinConcurrency = 1
		c.Breaker.ConsecutiveFailures = 1
		c.Breaker.OpenTimeout = time.Minute
		c.Retry.MaxAttempts = 1
	})
	first := doAsync(context.Background(), d, request())
	require.Eventually(t, func() bool { return d.Snapshot().InFlight == 1 }, 5*time.Second, time.Millisecond)
	short := request()
	short.Deadline = t0.Add(10 * time.Second)
	long := request()
	long.Deadline = t0.Add(10 * time.Minute)
	chShort := doAsync(context.Background(), d, short)
	chLong := doAsync(context.Background(), d, long)
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Normal] == 2 }, 5*time.Second, time.Millisecond)
	close(gate)
	require.ErrorIs(t, (<-first).err, dispatch.ErrRetriesExhausted)
	var res result
	select {
	case res = <-chShort: // no clock advance: answered when the breaker opened
	case <-time.After(5 * time.Second):
		t.Fatalf("the short request was not answered: %+v", d.Snapshot())
	}
	require.ErrorIs(t, res.err, dispatch.ErrUnavailable)
	select {
	case r := <-chLong:
		t.Fatalf("the request that can outlast the outage was answered: %v", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	require.Equal(t, t0, fc.Now())
	fc.Advance(2 * time.Minute) // past the next probe: it is sent
	require.Eventually(t, func() bool { return u.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	for range 10 { // the outage outlasts it: an outage answer, not a rate limit
		select {
		case res = <-chLong:
		case <-time.After(50 * time.Millisecond):
			fc.Advance(time.Minute)
			continue
		}
		break
	}
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.Equal(t, 529, de.Status, "%v", res.err)
	require.Equal(t, "overloaded_error", de.Type)
}

// TestQuotaWaitPastDeadlineIsStillARateLimit: waiting for quota is not an
// outage.
func TestQuotaWaitPastDeadlineIsStillARateLimit(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = 1
		c.BurstSeconds = 60
	})
	require.NoError(t, (<-doAsync(context.Background(), d, request())).err)
	r := request()
	r.Deadline = t0.Add(5 * time.Second)
	res := <-doAsync(context.Background(), d, r)
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.ErrorIs(t, res.err, dispatch.ErrShed)
	require.Equal(t, http.StatusTooManyRequests, de.Status)
	require.Equal(t, "rate_limit_error", de.Type)
}

// TestQueueWaitCountsBackoff: x-sluice-queue-ms is the whole wait before
// the final attempt, the backoff after a failed attempt included. The
// overload carries retry-after: 4, so the retry is at least 4 s of fake
// time after the first attempt ended, however the clock is stepped.
func TestQueueWaitCountsBackoff(t *testing.T) {
	t.Parallel()
	hinted := overloaded
	hinted.header = map[string]string{"retry-after": "4"}
	u := newUpstream(t, hinted, ok())
	d, fc, _ := start(t, u, nil)
	ch := doAsync(context.Background(), d, request())
	require.Eventually(t, func() bool { return u.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	res := recvStepping(t, fc, ch)
	require.NoError(t, res.err)
	require.Equal(t, 2, res.resp.Attempts)
	require.GreaterOrEqual(t, res.resp.QueueWait, 4*time.Second)
}
