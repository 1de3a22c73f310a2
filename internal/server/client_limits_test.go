package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
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
