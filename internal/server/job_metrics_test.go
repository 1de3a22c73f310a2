package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/opsview"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// scrapeAdminKey is the admin key scrape sends: the status rig's admin (an
// open gateway takes any key).
const scrapeAdminKey = "ck-ops"

// scrape answers GET /metrics from h, as an admin.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("X-Api-Key", scrapeAdminKey)
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}

func requireSeries(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		require.Contains(t, body, w+"\n", "series %s", w)
	}
}

// TestJobMetricsAfterJobsRan runs jobs through a started gateway (SQLite
// store, fake engine, fake clock) and reads the job series from GET
// /metrics: counters at once, the queue depth once its cached read is older
// than opsview.JobCountMaxAge.
func TestJobMetricsAfterJobsRan(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	srv, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}},
		Jobs:      jobs.Settings{Webhooks: jobs.Webhooks{Allow: []string{"127.0.0.1"}}}},
		withEngine("a", &fakeEngine{}), WithClock(clk), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	h := srv.Handler()
	api := func(method, target, body string) (int, []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
		return rec.Code, rec.Body.Bytes()
	}
	submit := func(extra ...string) int64 {
		code, body := api("POST", "/v1/jobs", `{"upstream":"a","request":`+anthropicBody+strings.Join(extra, "")+`}`)
		require.Equal(t, http.StatusAccepted, code, string(body))
		var j struct {
			ID int64 `json:"id"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		return j.ID
	}
	state := func(id int64) string {
		code, body := api("GET", "/v1/jobs/"+formatJobID(id), "")
		require.Equal(t, http.StatusOK, code, string(body))
		var j struct {
			State string `json:"state"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		return j.State
	}

	requireSeries(t, scrape(t, h),
		`sluice_jobs{state="queued",upstream="a"} 0`,
		`sluice_jobs{state="running",upstream="a"} 0`,
		`sluice_jobs_delayed{upstream="a"} 0`,
		`sluice_job_upstream_paused{upstream="a"} 0`,
		`sluice_jobs_submitted_total{upstream="a"} 0`,
		`sluice_jobs_count_errors_total 0`,
		`sluice_webhook_pending 0`,
		`sluice_webhook_oldest_pending_age_seconds 0`)

	ran := submit()
	require.Eventually(t, func() bool { return state(ran) == "succeeded" }, 10*time.Second, 5*time.Millisecond)
	code, body := api("POST", "/v1/upstreams/a/pause", "")
	require.Equal(t, http.StatusOK, code, string(body))
	// Its webhook receiver refuses connections: the delivery stays pending.
	waiting := submit(`,"webhook_url":"http://127.0.0.1:1/hook"`)
	require.Equal(t, "queued", state(waiting))

	body2 := scrape(t, h)
	requireSeries(t, body2,
		`sluice_jobs_submitted_total{upstream="a"} 2`,
		`sluice_jobs_finished_total{state="succeeded",upstream="a"} 1`,
		`sluice_jobs_finished_total{state="dead",upstream="a"} 0`,
		`sluice_job_attempts_total{outcome="success",upstream="a"} 1`,
		`sluice_job_attempts_total{outcome="rate_limited",upstream="a"} 0`,
		`sluice_job_queue_wait_seconds_count{upstream="a"} 1`,
		`sluice_job_queue_wait_seconds_bucket{upstream="a",le="0.001"} 1`, // no time passed on the fake clock
		`sluice_job_run_seconds_count{upstream="a"} 1`,
		`sluice_jobs_rescued_total{outcome="requeued"} 0`,
		`sluice_webhook_deliveries_total{outcome="delivered"} 0`,
		// The depth read at the first scrape is still fresh.
		`sluice_jobs{state="queued",upstream="a"} 0`,
		`sluice_job_upstream_paused{upstream="a"} 0`)

	clk.Advance(opsview.JobCountMaxAge)
	requireSeries(t, scrape(t, h),
		`sluice_jobs{state="queued",upstream="a"} 1`,
		`sluice_jobs{state="running",upstream="a"} 0`,
		`sluice_job_upstream_paused{upstream="a"} 1`,
		`sluice_jobs_count_errors_total 0`)

	code, body = api("DELETE", "/v1/jobs/"+formatJobID(waiting), "")
	require.Equal(t, http.StatusOK, code, string(body))
	requireSeries(t, scrape(t, h), `sluice_jobs_finished_total{state="canceled",upstream="a"} 1`)

	clk.Advance(opsview.JobCountMaxAge)
	requireSeries(t, scrape(t, h),
		`sluice_webhook_pending 1`,
		`sluice_webhook_oldest_pending_age_seconds 5`)
}

// TestJobMetricsDisabledWithStoreNone: without a job queue there are no job
// series at all.
func TestJobMetricsDisabledWithStoreNone(t *testing.T) {
	t.Parallel()
	srv, err := New(Config{Store: StoreNone, Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}}},
		withEngine("a", &fakeEngine{}), WithLogger(discardLogger()))
	require.NoError(t, err)
	body := scrape(t, srv.Handler())
	require.Contains(t, body, "sluice_passthrough_requests_total")
	for _, name := range []string{"sluice_jobs", "sluice_job_", "sluice_webhook_"} {
		require.NotContains(t, body, "\n"+name)
	}
}

func formatJobID(id int64) string {
	b, _ := json.Marshal(id)
	return string(b)
}
