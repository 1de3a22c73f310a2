package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestFlexAnswerChargedAtTheFlexFactor: a budgeted client's job sent in
// OpenAI's flex tier is charged the usage the provider reported at the
// flex factor of the price table (0.5), computed here from the list
// price, and a job in the standard tier at 1; the money the flex tier
// saved shows in /v1/status (upstreams[].batch_route.flex_*, and in
// saved_usd) and in the metrics. (Before: flex answers were charged at
// half price but counted in no saving.)
func TestFlexAnswerChargedAtTheFlexFactor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Clock: clk, OutputTokens: mock.OutputRange{Min: 200, Max: 200}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up",
			Flex: upcfg.Flex{Enabled: true, MinSlack: 10 * time.Minute}}},
		Clients: []clients.Config{{Name: "batch", Key: "ck-batch", Budget: admit.Budget{Day: 10}},
			{Name: "ops", Key: scrapeAdminKey, Role: clients.RoleAdmin}}},
		WithClock(clk), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	// run submits a job with deadline from now and returns it answered.
	run := func(deadline time.Duration) jobsapi.JobView {
		t.Helper()
		body := fmt.Sprintf(`{"upstream":"gpt","deadline":%q,"request":{"model":"gpt-4o","max_tokens":256,"messages":[{"role":"user","content":"hello there"}]}}`,
			clk.Now().Add(deadline).Format(time.RFC3339))
		code, b := call(t, "POST", base+"/v1/jobs", "ck-batch", body)
		require.Equal(t, http.StatusAccepted, code, string(b))
		var j jobsapi.JobView
		require.NoError(t, json.Unmarshal(b, &j))
		require.Eventually(t, func() bool {
			_, b := call(t, "GET", base+"/v1/jobs/"+strconv.FormatInt(j.ID, 10), "ck-batch", "")
			require.NoError(t, json.Unmarshal(b, &j))
			if j.State.Finished() {
				return true
			}
			clk.Advance(100 * time.Millisecond)
			return false
		}, 30*time.Second, 5*time.Millisecond)
		require.Equal(t, "succeeded", string(j.State))
		return j
	}
	// gpt-4o's list price: $2.50 in, $10 out per million tokens.
	price := func(u llm.Usage) float64 { return (float64(u.InputTokens)*2.5 + float64(u.OutputTokens)*10) / 1e6 }
	costOf := func(j jobsapi.JobView) float64 {
		v, err := strconv.ParseFloat(j.Response.Headers["X-Sluice-Cost-Usd"], 64)
		require.NoError(t, err)
		return v
	}
	nano := func(usd float64) int64 { return int64(math.Round(usd * 1e9)) }

	flex := run(time.Hour)
	require.Equal(t, "flex", flex.Response.Body.(map[string]any)["service_tier"])
	require.Positive(t, flex.Response.Usage.InputTokens)
	require.Equal(t, int64(200), flex.Response.Usage.OutputTokens)
	flexUSD := price(flex.Response.Usage) * 0.5
	require.Equal(t, nano(flexUSD), nano(costOf(flex)), "the flex answer at the flex factor")

	std := run(5 * time.Minute) // too near its deadline for flex
	require.Equal(t, "default", std.Response.Body.(map[string]any)["service_tier"])
	stdUSD := price(std.Response.Usage)
	require.Equal(t, nano(stdUSD), nano(costOf(std)), "the standard answer at the list price")

	code, b := call(t, "GET", base+"/v1/status", scrapeAdminKey, "")
	require.Equal(t, http.StatusOK, code, string(b))
	var status struct {
		Upstreams []struct {
			Name       string `json:"name"`
			BatchRoute *struct {
				FlexAnswers     int64   `json:"flex_answers"`
				FlexSpentUSD    float64 `json:"flex_spent_usd"`
				FlexStandardUSD float64 `json:"flex_standard_usd"`
				FlexSavedUSD    float64 `json:"flex_saved_usd"`
				SavedUSD        float64 `json:"saved_usd"`
			} `json:"batch_route"`
		} `json:"upstreams"`
		Spend struct {
			Clients []struct {
				Client string `json:"client"`
				Day    struct {
					SpentUSD float64 `json:"spent_usd"`
				} `json:"day"`
			} `json:"clients"`
		} `json:"spend"`
	}
	require.NoError(t, json.Unmarshal(b, &status))
	route := status.Upstreams[0].BatchRoute
	require.NotNil(t, route)
	// The status rounds to a millionth of a dollar.
	const micro = 1e-6
	require.Equal(t, int64(1), route.FlexAnswers)
	require.InDelta(t, flexUSD, route.FlexSpentUSD, micro)
	require.InDelta(t, 2*flexUSD, route.FlexStandardUSD, micro)
	require.InDelta(t, flexUSD, route.FlexSavedUSD, micro)
	require.InDelta(t, flexUSD, route.SavedUSD, micro, "the flex saving is in saved_usd")
	var spent float64
	for _, c := range status.Spend.Clients {
		if c.Client == "batch" {
			spent = c.Day.SpentUSD
		}
	}
	require.InDelta(t, flexUSD+stdUSD, spent, micro, "the budget counts both at their tier's price")

	metrics := scrape(t, g.Handler())
	require.Equal(t, nano(flexUSD), nano(metricSum(metrics, "sluice_flex_spend_usd_total", `upstream="gpt"`)))
	require.Equal(t, nano(flexUSD), nano(metricSum(metrics, "sluice_flex_saved_usd_total", `upstream="gpt"`)))
	require.Equal(t, nano(flexUSD+stdUSD), nano(metricSum(metrics, "sluice_spend_usd_total", `client="batch"`)))
}
