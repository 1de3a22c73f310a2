package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestJobsUseFlexWhenTheirDeadlineAllows runs jobs through a started
// gateway and the mock provider on one fake clock, on an OpenAI upstream
// with flex enabled: a job whose deadline leaves the slack is sent in the
// flex tier; one too close to its deadline, one whose body names a tier,
// and a live request are not; a job refused for want of flex capacity is
// retried in the standard tier and succeeds before its deadline.
func TestJobsUseFlexWhenTheirDeadlineAllows(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", Clock: clk, OutputTokens: mock.OutputRange{Min: 3, Max: 3}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up",
			Flex: upcfg.Flex{Enabled: true, MinSlack: 10 * time.Minute}}},
		Clients: []clients.Config{{Name: "batch", Key: "ck-batch"}},
		Jobs:    jobs.Settings{MaxAttempts: 5}},
		WithClock(clk), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	submit := func(deadline time.Duration, extra string) string {
		t.Helper()
		body := fmt.Sprintf(`{"upstream":"gpt","deadline":%q,"request":{"model":"gpt-4o-mini","max_tokens":16%s,"messages":[{"role":"user","content":"hello"}]}}`,
			clk.Now().Add(deadline).Format(time.RFC3339), extra)
		code, b := call(t, "POST", base+"/v1/jobs", "ck-batch", body)
		require.Equal(t, http.StatusAccepted, code, string(b))
		var j struct {
			ID json.Number `json:"id"`
		}
		require.NoError(t, json.Unmarshal(b, &j))
		return j.ID.String()
	}
	// finish steps the clock until the job has ended and returns the tier
	// that served it.
	finish := func(id string) (state, tier string) {
		t.Helper()
		var j struct {
			State    string `json:"state"`
			Response *struct {
				Body struct {
					ServiceTier string `json:"service_tier"`
				} `json:"body"`
			} `json:"response"`
		}
		require.Eventually(t, func() bool {
			_, b := call(t, "GET", base+"/v1/jobs/"+id, "ck-batch", "")
			require.NoError(t, json.Unmarshal(b, &j))
			if j.State == "succeeded" || j.State == "dead" {
				return true
			}
			clk.Advance(100 * time.Millisecond)
			return false
		}, 30*time.Second, 5*time.Millisecond)
		if j.Response == nil {
			return j.State, ""
		}
		return j.State, j.Response.Body.ServiceTier
	}

	state, tier := finish(submit(time.Hour, ""))
	require.Equal(t, "succeeded", state)
	require.Equal(t, "flex", tier, "a job with an hour to go is sent in the flex tier")

	_, tier = finish(submit(5*time.Minute, ""))
	require.Equal(t, "default", tier, "a job closer to its deadline than the slack keeps the standard tier")

	_, tier = finish(submit(time.Hour, `,"service_tier":"default"`))
	require.Equal(t, "default", tier, "a job whose body names a tier keeps it")

	code, b := call(t, "POST", base+"/gpt/v1/chat/completions", "ck-batch",
		`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`)
	require.Equal(t, http.StatusOK, code, string(b))
	require.Contains(t, string(b), `"service_tier":"default"`, "a live request is never moved to flex")

	// No flex capacity: the first attempt is refused, the retry goes in
	// the standard tier and succeeds well before the deadline.
	require.NoError(t, m.SetFaults(mock.Faults{FlexUnavailableRate: 1}))
	start := clk.Now()
	state, tier = finish(submit(time.Hour, ""))
	require.Equal(t, "succeeded", state)
	require.Equal(t, "default", tier)
	require.Less(t, clk.Now().Sub(start), 10*time.Minute)
	st := m.Stats().Overall
	require.Equal(t, int64(1), st.ByStatus["429"], "one flex refusal")
	require.Equal(t, map[string]int64{"flex": 1, "default": 4}, st.ByServiceTier)
}
