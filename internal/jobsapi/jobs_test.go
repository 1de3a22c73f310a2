package jobsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

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
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body)))
			body := rec.Body.Bytes()
			require.Equal(t, tc.status, rec.Code, string(body))
			e := decode[jobsapi.APIError](t, body)
			require.Contains(t, e.Error.Message, tc.want)
			// Every error carries its request id, as the proxy's do.
			id := rec.Header().Get(frontdoor.HeaderRequestID)
			require.True(t, strings.HasPrefix(id, "req_sluice_"), "X-Sluice-Request-Id %q", id)
			require.Equal(t, id, e.RequestID)
		})
	}
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
	require.Equal(t, jobstore.StateRunning, decode[jobsapi.JobView](t, body).State)
	got := make(chan jobsapi.JobView)
	go func() {
		_, body := do(t, s.Handler(), "GET", "/v1/jobs/"+formatID(j.ID)+"?wait=30s", "")
		var v jobsapi.JobView
		_ = json.Unmarshal(body, &v)
		got <- v
	}()
	close(release)
	v := <-got
	require.Equal(t, jobstore.StateSucceeded, v.State)
}

func TestListPaginationPauseAndRetry(t *testing.T) {
	t.Parallel()
	bad := &fakeDispatcher{fn: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return reply(400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`), nil
	}}
	s := newService(t, nil, bad, nil, func(c *config) { c.Owner = "manual" })
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
	// Newest first by default, oldest first with order=oldest; the cursor
	// pages on in the order asked for.
	list := func(order string) []int64 {
		var seen []int64
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3, "three pages of two")
			code, body := do(t, h, "GET", "/v1/jobs?upstream=claude&state=queued&limit=2&cursor="+cursor+order, "")
			require.Equal(t, 200, code, string(body))
			page := decode[jobsapi.ListResponse](t, body)
			for _, v := range page.Data {
				seen = append(seen, v.ID)
			}
			if !page.HasMore {
				break
			}
			cursor = page.NextCursor
		}
		return seen
	}
	require.Equal(t, ids, list("&order=oldest"))
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	require.Equal(t, newest, list(""))
	require.Equal(t, newest, list("&order=newest"))
	code, body = do(t, h, "GET", "/v1/jobs?order=latest", "")
	require.Equal(t, 400, code)
	require.Contains(t, string(body), `order: \"latest\" is not newest or oldest`)
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

// TestPauseAndResumeAreLogged: pausing or resuming an upstream's job
// queue stops or restarts all its jobs: the log says which and who (issue
// 27: it was silent).
func TestPauseAndResumeAreLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	s := newService(t, nil, succeed(), nil, func(c *config) { c.Owner = "manual"; c.API.Logger = log })
	h := s.Handler()
	for _, action := range []string{"pause", "resume"} {
		code, body := do(t, h, "POST", "/v1/upstreams/claude/"+action, "", "X-Sluice-Client", "ops")
		require.Equal(t, http.StatusOK, code, string(body))
	}
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		got = append(got, rec)
	}
	require.Len(t, got, 2, logs.String())
	require.Equal(t, "job queue paused for upstream", got[0]["msg"])
	require.Equal(t, "job queue resumed for upstream", got[1]["msg"])
	for _, rec := range got {
		require.Equal(t, "claude", rec["upstream"])
		require.Equal(t, "ops", rec["client"])
	}
}
