package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The batch route end to end (issue 26): jobs submitted through the jobs
// API of a gateway over HTTP, on an upstream whose batch: section routes
// their class, reach the mock provider's Batch API as grouped batches,
// and come back into the jobs, each once, with the spend the provider
// billed. The gateway and the mock share one fake clock: the batches'
// processing time and the router's polls are fake time.

// batchPrices are the mock's standard prices, those of Sluice's shipped
// price table (internal/pricing): the mock bills at half of them.
var batchPrices = map[string]mock.BatchPrice{"claude-sonnet-4-5": {Input: 3, Output: 15}, "gpt-4o-mini": {Input: 0.15, Output: 0.6}}

// routedJob is the body of a POST /v1/jobs of a low job with a long
// deadline, to path ("" for the protocol's chat path).
func routedJob(p llm.Protocol, path string, i int, deadline time.Time) string {
	req := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"question %d"}]}`, i)
	switch {
	case path == "/v1/responses":
		req = fmt.Sprintf(`{"model":"gpt-4o-mini","max_output_tokens":32,"input":"question %d"}`, i)
	case p == llm.OpenAI:
		req = fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":32,"messages":[{"role":"user","content":"question %d"}]}`, i)
	}
	pathField := ""
	if path != "" {
		pathField = fmt.Sprintf(`"path":%q,`, path)
	}
	return fmt.Sprintf(`{"upstream":"up","priority":"low","deadline":%q,%s"request":%s}`, deadline.Format(time.RFC3339), pathField, req)
}

// routedGateway is a gateway on store whose upstream "up" (protocol p, at
// base) routes its low jobs to the provider's Batch API in groups of 50.
func routedGateway(t *testing.T, p llm.Protocol, base, store string, clk clock.Clock) *Server {
	t.Helper()
	g, err := New(Config{Store: store, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "up", Protocol: p, BaseURL: base, APIKey: "sk-up",
			Batch: upcfg.BatchRoute{Route: upcfg.BatchRouteProvider, Classes: []string{"low"}, MinGroup: 50, MaxRequests: 50,
				MaxWait: 10 * time.Minute, PollInterval: time.Minute}}},
		Clients: []clients.Config{{Name: "nightly", Key: "ck-nightly"}}, Metrics: MetricsConfig{Public: true}},
		WithClock(clk), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	return g
}

func TestBatchRouteEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proto llm.Protocol
		// paths are the jobs' endpoints, 60 jobs each.
		paths   []string
		batches int64
	}{
		{llm.Anthropic, []string{""}, 2},
		// One OpenAI batch carries one endpoint: a group per path.
		{llm.OpenAI, []string{"/v1/chat/completions", "/v1/responses"}, 4},
	} {
		t.Run(string(tc.proto), func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
			fc := clock.NewFake(t0)
			m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Clock: fc, OutputTokens: mock.OutputRange{Min: 5, Max: 40}, Seed: 7,
				Batch: mock.BatchConfig{Processing: 30 * time.Minute, Prices: batchPrices}})
			require.NoError(t, err)
			require.NoError(t, m.Start(t.Context()))
			t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
			g := routedGateway(t, tc.proto, m.URL(), testStore(t), fc)
			base := "http://" + g.Addr()

			var ids []string
			for _, path := range tc.paths {
				for i := range 60 {
					code, body := call(t, "POST", base+"/v1/jobs", "ck-nightly", routedJob(tc.proto, path, len(ids)+i, t0.Add(12*time.Hour)))
					require.Equal(t, http.StatusAccepted, code, string(body))
					var j struct {
						ID json.Number `json:"id"`
					}
					require.NoError(t, json.Unmarshal(body, &j))
					ids = append(ids, j.ID.String())
				}
			}
			st := g.jobs.Load().Store()
			succeeded := func() int {
				page, err := st.List(t.Context(), jobstore.ListParams{State: jobstore.StateSucceeded, Limit: 1000})
				require.NoError(t, err)
				return len(page.Jobs)
			}
			// Fake time runs a minute a step: groups of 50 at once, the
			// rest after max_wait, every batch ended after 30 minutes.
			require.Eventually(t, func() bool {
				fc.Advance(time.Minute)
				return succeeded() == len(ids)
			}, 60*time.Second, 10*time.Millisecond)

			stats := m.Stats().Overall
			require.Equal(t, tc.batches, stats.Batch.Batches, "the jobs went grouped, each group once")
			require.Equal(t, int64(len(ids)), stats.Batch.Lines["succeeded"])
			require.Zero(t, stats.Admitted.Requests, "no job went the synchronous way")
			for _, id := range ids {
				code, body := call(t, "GET", base+"/v1/jobs/"+id, "ck-nightly", "")
				require.Equal(t, http.StatusOK, code, string(body))
				var j struct {
					State    string `json:"state"`
					Attempts int    `json:"attempts"`
					Response struct {
						Status  int               `json:"status"`
						Headers map[string]string `json:"headers"`
						Usage   llm.Usage         `json:"usage"`
					} `json:"response"`
				}
				require.NoError(t, json.Unmarshal(body, &j))
				require.Equal(t, "succeeded", j.State)
				require.Equal(t, 1, j.Attempts)
				require.Equal(t, http.StatusOK, j.Response.Status)
				require.Equal(t, "provider", j.Response.Headers[jobs.BatchHeader])
				require.Positive(t, j.Response.Usage.OutputTokens)
			}

			// Spend: each line once, at the batch price: the store holds
			// what the mock billed, to the nano-dollar, and the status
			// shows it to the cent.
			rows, err := st.Spend(t.Context(), jobstore.SpendParams{})
			require.NoError(t, err)
			var nanos, requests int64
			for _, r := range rows {
				require.Equal(t, "nightly", r.Client)
				nanos += r.Nanos
				requests += r.Requests
			}
			require.Equal(t, int64(len(ids)), requests)
			require.Positive(t, stats.Batch.CostNanos)
			require.Equal(t, stats.Batch.CostNanos, nanos)
			code, body := call(t, "GET", base+"/v1/status", "ck-nightly", "")
			require.Equal(t, http.StatusOK, code, string(body))
			var status struct {
				Upstreams []struct {
					Name       string `json:"name"`
					BatchRoute *struct {
						Succeeded int64   `json:"lines_succeeded"`
						SpentUSD  float64 `json:"spent_usd"`
						SavedUSD  float64 `json:"saved_usd"`
					} `json:"batch_route"`
				} `json:"upstreams"`
				Spend struct {
					Clients []struct {
						Client string `json:"client"`
						Total  struct {
							SpentUSD float64 `json:"spent_usd"`
						} `json:"total"`
					} `json:"clients"`
				} `json:"spend"`
			}
			require.NoError(t, json.Unmarshal(body, &status))
			require.Len(t, status.Spend.Clients, 1)
			cents := func(usd float64) float64 { return math.Round(usd * 100) }
			require.Equal(t, cents(stats.Batch.CostUSD), cents(status.Spend.Clients[0].Total.SpentUSD))
			// The upstream's routing: what it answered, cost and saved
			// (the batch price is half the standard one).
			require.Len(t, status.Upstreams, 1)
			route := status.Upstreams[0].BatchRoute
			require.NotNil(t, route)
			require.Equal(t, int64(len(ids)), route.Succeeded)
			require.Equal(t, cents(stats.Batch.CostUSD), cents(route.SpentUSD))
			require.InDelta(t, route.SpentUSD, route.SavedUSD, 0.01)

			// The metrics say the same: groups, lines, spend and saving.
			code, body = call(t, "GET", base+"/metrics", "", "")
			require.Equal(t, http.StatusOK, code)
			metrics := string(body)
			up := `upstream="up"`
			for event, n := range map[string]int64{"formed": tc.batches, "submitted": tc.batches, "ended": tc.batches, "refused": 0, "pulled_back": 0} {
				require.Equal(t, float64(n), metricSum(metrics, "sluice_batch_groups_total", up, `event="`+event+`"`), event)
			}
			require.Equal(t, float64(len(ids)), metricSum(metrics, "sluice_batch_lines_total", up, `outcome="succeeded"`))
			require.Equal(t, float64(len(ids)), metricSum(metrics, "sluice_batch_lines_total", up))
			nanos9 := func(usd float64) int64 { return int64(math.Round(usd * 1e9)) }
			require.Equal(t, stats.Batch.CostNanos, nanos9(metricSum(metrics, "sluice_batch_spend_usd_total", up)))
			// At half the standard price, the saving is what it cost.
			require.InDelta(t, float64(stats.Batch.CostNanos)/1e9, metricSum(metrics, "sluice_batch_saved_usd_total", up), 1e-6)
		})
	}
}
