package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestClientLimitWaitsOrRefuses: over its requests_per_minute, a client's
// request waits for its own bucket, or is refused 429 with retry-after
// from that bucket when its deadline comes first; another client with the
// same limit is not affected. Fake clock through the real handlers.
func TestClientLimitWaitsOrRefuses(t *testing.T) {
	t.Parallel()
	perMinute := ClientLimits{LimitValues: LimitValues{RequestsPerMinute: 60}} // one a second, burst of one
	ts := newTestServer(t, []ClientConfig{{Name: "a", Key: "ck-a", Limits: perMinute}, {Name: "b", Key: "ck-b", Limits: perMinute}})
	send := func(key, deadline string) (httpReply, []byte) {
		h := map[string]string{"x-api-key": key}
		if deadline != "" {
			h["X-Sluice-Deadline"] = deadline
		}
		return ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	}
	r, body := send("ck-a", "")
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))

	r, body = send("ck-a", "500ms")
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode, string(body))
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "rate_limit_error"), "client a is over its own rate limit")
	require.Equal(t, "1", r.Header.Get("Retry-After"), "from a's own bucket: one request a second")

	r, body = send("ck-b", "500ms")
	require.Equal(t, http.StatusOK, r.StatusCode, "b has its own bucket: %s", body)

	got := make(chan int, 1)
	go func() {
		r, _ := send("ck-a", "30s")
		got <- r.StatusCode
	}()
	require.True(t, ts.clock.WaitForTimers(1, 5*time.Second), "a's request waits for a's room")
	ts.clock.Advance(time.Second)
	require.Equal(t, http.StatusOK, <-got)
	require.Len(t, ts.a.calls(), 3, "the refused request never reached the engine")
}

// TestClientMaxConcurrency: a client at its max_concurrency waits for one
// of its own requests to finish, and is refused 429 when its deadline
// passes first; other clients are not held.
func TestClientMaxConcurrency(t *testing.T) {
	t.Parallel()
	one := ClientLimits{LimitValues: LimitValues{MaxConcurrency: 1}}
	ts := newTestServer(t, []ClientConfig{{Name: "a", Key: "ck-a", Limits: one}, {Name: "b", Key: "ck-b", Limits: one}})
	release := make(chan struct{})
	ts.a.do = func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		if req.Client == "a" && req.Priority == llm.Low {
			<-release
		}
		return okResponse(`{"ok":true}`), nil
	}
	send := func(key string, h map[string]string) int {
		h["x-api-key"] = key
		r, _ := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
		return r.StatusCode
	}
	held := make(chan int, 1)
	go func() { held <- send("ck-a", map[string]string{"X-Priority": "low"}) }()
	require.Eventually(t, func() bool { return len(ts.a.calls()) == 1 }, 5*time.Second, time.Millisecond)

	require.Equal(t, http.StatusOK, send("ck-b", map[string]string{}), "b's slot is its own")
	waiting := make(chan int, 1)
	go func() { waiting <- send("ck-a", map[string]string{"X-Sluice-Deadline": "2s"}) }()
	require.True(t, ts.clock.WaitForTimers(1, 5*time.Second))
	ts.clock.Advance(2 * time.Second)
	require.Equal(t, http.StatusTooManyRequests, <-waiting)

	go func() { waiting <- send("ck-a", map[string]string{"X-Sluice-Deadline": "30s"}) }()
	require.True(t, ts.clock.WaitForTimers(1, 5*time.Second))
	close(release)
	require.Equal(t, http.StatusOK, <-held)
	require.Equal(t, http.StatusOK, <-waiting, "the freed slot went to a's waiting request")
}

// TestClientLimitsHoldJobs: a job's call is admitted under its client's
// limits without waiting. Over them the job is given back with the
// client's next free turn (each refused job a later one, at the client's
// rate, so they do not all come back at once); another client is not
// affected; a finished call frees its concurrency slot; a call that can
// never fit is refused for good. Fake clock through the real job door.
func TestClientLimitsHoldJobs(t *testing.T) {
	t.Parallel()
	perMinute := ClientLimits{LimitValues: LimitValues{RequestsPerMinute: 60}} // one a second, burst of one
	one := ClientLimits{LimitValues: LimitValues{MaxConcurrency: 1}}
	tiny := ClientLimits{LimitValues: LimitValues{TokensPerMinute: 10}}
	ts := newTestServer(t, []ClientConfig{{Name: "a", Key: "ck-a", Limits: perMinute}, {Name: "b", Key: "ck-b", Limits: perMinute},
		{Name: "c", Key: "ck-c", Limits: one}, {Name: "d", Key: "ck-d", Limits: tiny}, {Name: "free", Key: "ck-free"}})
	js := jobSpender{ts.srv}
	now := ts.clock.Now()
	req := func(client string) *dispatch.Request {
		return &dispatch.Request{Client: client, Priority: llm.Low, Cost: provider.Cost{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 16}}
	}
	h, err := js.Reserve("a", req("a"))
	require.NoError(t, err, "a's first call fits its burst")
	var turns []time.Time
	for range 3 {
		_, err := js.Reserve("a", req("a"))
		var be *jobs.BudgetError
		require.ErrorAs(t, err, &be)
		require.Equal(t, http.StatusTooManyRequests, be.Status)
		require.Contains(t, be.Message, "client a is over its own rate limit")
		turns = append(turns, be.RetryAt)
	}
	require.Equal(t, []time.Time{now.Add(time.Second), now.Add(2 * time.Second), now.Add(3 * time.Second)}, turns,
		"the refused jobs come back one at a time, at a's rate")
	h.Settle(dispatch.End{}, true)
	_, err = js.Reserve("a", req("b"))
	require.NoError(t, err, "b has its own bucket")
	_, err = js.Reserve("a", req("free"))
	require.NoError(t, err, "a client without limits is not held")

	hc, err := js.Reserve("a", req("c"))
	require.NoError(t, err)
	_, err = js.Reserve("a", req("c"))
	var be *jobs.BudgetError
	require.ErrorAs(t, err, &be, "c is at its max_concurrency")
	hc.Settle(dispatch.End{}, false)
	_, err = js.Reserve("a", req("c"))
	require.NoError(t, err, "the slot came back with the call")

	_, err = js.Reserve("a", req("d"))
	require.ErrorAs(t, err, &be)
	require.Equal(t, http.StatusBadRequest, be.Status)
	require.True(t, be.RetryAt.IsZero(), "26 tokens never fit 10 a minute: the job dies")

	ts.clock.Advance(4 * time.Second)
	_, err = js.Reserve("a", req("a"))
	require.NoError(t, err, "a's bucket refilled")
}
