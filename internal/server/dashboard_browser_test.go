package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// chromiumPath finds a Chromium to drive. Missing, the browser test skips,
// except in CI (CI=true), where .ci/run installs it and its absence fails.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install -y chromium); CI must run the browser test")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium)")
	return ""
}

// artifactsDir is where the test saves what a person looks at afterwards:
// $SLUICE_TEST_ARTIFACTS (.ci/run sets it), else a new temporary directory
// that is kept.
func artifactsDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("SLUICE_TEST_ARTIFACTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	d, err := os.MkdirTemp("", "sluice-artifacts-")
	require.NoError(t, err)
	return d
}

// metricSum sums the samples of name whose labels contain every one of
// labels, in a /metrics scrape.
func metricSum(body, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// TestDashboardInBrowser loads /ui in headless Chromium against a gateway
// that served a small workload on the mock provider: the numbers the page
// shows match /v1/status and /metrics, the dead-letter queue's Requeue
// button takes a dead job out of it, the breaker buttons work, and a
// screenshot is saved as a test artifact.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	chrome := chromiumPath(t)

	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 5, Max: 20}, Seed: 11,
		Limits: mock.Limits{RPM: 600}})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	// An admin (the page's key) and a team with a daily budget that may
	// use claude-x only.
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}},
		Clients: []clients.Config{{Name: "ops", Key: "ops-key", Role: clients.RoleAdmin},
			{Name: "team", Key: "team-key", Budget: admit.Budget{Day: 5}, Access: admit.Access{Models: []string{"claude-x"}}}},
		Jobs: jobs.Settings{MaxAttempts: 1}}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	// The workload: live requests of several classes, a batch, and one
	// job the provider refuses (no model), which goes to the DLQ.
	for i, p := range []string{"high", "normal", "normal", "low", "low", "low"} {
		req, err := http.NewRequestWithContext(t.Context(), "POST", base+"/claude/v1/messages",
			strings.NewReader(fmt.Sprintf(`{"model":"claude-x","max_tokens":32,"messages":[{"role":"user","content":"hello %d"}]}`, i)))
		require.NoError(t, err)
		req.Header.Set("X-Priority", p)
		req.Header.Set("x-api-key", "team-key")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// A model the team may not use: refused, with its reason.
	code, body := call(t, "POST", base+"/claude/v1/messages", "team-key", `{"model":"claude-y","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusForbidden, code, string(body))
	var lines []string
	for i := range 5 {
		lines = append(lines, fmt.Sprintf(`{"custom_id":"r%d","params":{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`, i))
	}
	code, body = call(t, "POST", base+"/v1/batches?upstream=claude", "ops-key", strings.Join(lines, "\n"))
	require.Equal(t, http.StatusOK, code, string(body))
	code, body = call(t, "POST", base+"/v1/jobs", "ops-key", `{"upstream":"claude","request":{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":[{"text":"a block without a type"}]}]}}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var dead struct {
		ID json.Number `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &dead))
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/jobs/"+dead.ID.String(), "ops-key", "")
		return strings.Contains(string(b), `"state":"dead"`)
	}, 20*time.Second, 50*time.Millisecond, "the refused job is dead")
	require.Eventually(t, func() bool {
		_, b := call(t, "GET", base+"/v1/jobs?state=queued", "ops-key", "")
		_, r := call(t, "GET", base+"/v1/jobs?state=running", "ops-key", "")
		return strings.Contains(string(b), `"data":[]`) && strings.Contains(string(r), `"data":[]`)
	}, 20*time.Second, 50*time.Millisecond, "the batch finished")
	// Hold the upstream's jobs so that the requeued one stays queued.
	code, body = call(t, "POST", base+"/v1/upstreams/claude/pause", "ops-key", "")
	require.Equal(t, http.StatusOK, code, string(body))

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.WindowSize(1400, 1700))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui"),
		chromedp.SendKeys(chromedp.CSS("#key"), "ops-key"),
		chromedp.Click(chromedp.CSS("#keyform button")),
	))
	waitReady := func() {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.ready || "0"`))
		require.NoError(t, err)
		before, _ := strconv.Atoi(n)
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`Number(document.body.dataset.ready || 0) > %d`, before+1),
			chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "the page refreshed twice")
	}
	waitReady()
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {textContent: "MISSING"}).textContent`, sel)))
		require.NoError(t, err)
		return strings.TrimSpace(s)
	}

	// The numbers shown match /v1/status and /metrics (the workload is
	// over: they no longer move).
	code, body = call(t, "GET", base+"/v1/status", "ops-key", "")
	require.Equal(t, http.StatusOK, code)
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	u := st.Upstreams[0]
	card := `[data-upstream="claude"] `
	require.Equal(t, strconv.Itoa(u.InFlight), text(card+`[data-k="in-flight"]`))
	for _, c := range []string{"critical", "high", "normal", "low"} {
		require.Equal(t, strconv.Itoa(u.Queued[c]), text(card+`[data-k="queued-`+c+`"]`), c)
	}
	require.Equal(t, u.Breaker, text(card+`[data-k="breaker"]`))
	require.Equal(t, "1", text(card+`[data-k="jobs-dead"]`))
	require.Equal(t, strconv.Itoa(u.Jobs.Dead), text(card+`[data-k="jobs-dead"]`))
	require.Equal(t, "nothing waits", text(card+`[data-k="waiting"]`))
	b, ok := u.Buckets["requests"]
	require.True(t, ok, "the requests limit was learned from the mock's headers")
	require.Equal(t, strconv.FormatFloat(b.LimitPerMinute, 'f', -1, 64), text(card+`[data-k="limit-requests"]`))
	rec := httptest.NewRecorder()
	mreq := httptest.NewRequest("GET", "/metrics", nil)
	mreq.Header.Set("X-Api-Key", "ops-key")
	g.Handler().ServeHTTP(rec, mreq)
	require.Equal(t, http.StatusOK, rec.Code)
	scraped := rec.Body.String()
	total := metricSum(scraped, "sluice_requests_total", `upstream="claude"`)
	success := metricSum(scraped, "sluice_requests_total", `upstream="claude"`, `outcome="success"`)
	require.GreaterOrEqual(t, total, 6.0)
	require.Equal(t, strconv.Itoa(int(math.Round(total))), text(card+`[data-k="requests-total"]`))
	require.Equal(t, strconv.Itoa(int(math.Round(success))), text(card+`[data-k="requests-success"]`))
	require.Regexp(t, regexp.MustCompile(`^\d+/5$`), strings.Fields(text(`#batches tbody tr td:nth-child(3)`))[0], "the batch's progress")
	require.Contains(t, text(`#dlq [data-job="`+dead.ID.String()+`"] td.err`), "type: Field required", "the DLQ shows the job's error")
	require.NotEqual(t, "MISSING", text(`#clients tbody tr[data-client]`), "the clients table")

	// The charts are uPlot's, with data: a canvas each, a time axis, a
	// legend with each series' unit.
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const out = [];
		for (const [id, u] of window.sluiceCharts) {
			const box = u.root.closest(".chart");
			const nonNull = u.data.slice(1).some((s) => s.some((v) => v !== null && v !== undefined));
			out.push([id, box.querySelector("canvas") !== null, u.data[0].length, nonNull, u.scales.x.time,
				[...box.querySelectorAll(".u-legend .u-series")].map((e) => e.textContent.trim()).join(";"), box.querySelector("h3").textContent].join("|"));
		}
		return out.join("\n");
	})()`))
	require.NoError(t, err)
	byID := map[string][]string{}
	for _, line := range strings.Split(charts, "\n") {
		f := strings.Split(line, "|")
		byID[f[0]] = f[1:]
	}
	for id, unit := range map[string]string{"claude/queue": "req", "claude/rates": "req/s", "claude/latency": "s", "claude/bucket-requests": "req"} {
		c, ok := byID[id]
		require.True(t, ok, "chart %s drawn: %s", id, charts)
		require.Equal(t, "true", c[0], "%s: a canvas", id)
		n, _ := strconv.Atoi(c[1])
		require.Positive(t, n, "%s: samples on the time axis", id)
		require.Equal(t, "true", c[2], "%s: a series with data", id)
		require.Equal(t, "true", c[3], "%s: a time axis", id)
		require.Contains(t, c[5], "("+unit+")", "%s: the unit in the title", id)
		require.Contains(t, c[4], "("+unit+")", "%s: the legend's entries carry the unit: %s", id, c[4])
	}
	require.Regexp(t, `admitted \(req/s\)\d`, byID["claude/rates"][4], "the legend shows the latest value")
	require.Contains(t, byID["claude/rates"][4], "provider 429")
	require.Contains(t, byID["claude/latency"][4], "critical p95")
	require.Contains(t, byID["claude/bucket-requests"][4], "provider reports left", "a legend entry for the provider's view")
	require.Contains(t, text(card+`[data-k="gauge-key"]`), "provider's last reported used", "the gauge's tick has a legend")
	require.Equal(t, strconv.FormatFloat(b.Level, 'f', -1, 64), text(card+`[data-k="available-requests"]`))
	require.NotContains(t, strings.ReplaceAll(text(card+`[data-k="gauge-requests"]`), "kept for more urgent classes (headroom)", ""), "headroom",
		"one meaning per word: available is the room now, headroom the share kept for more urgent classes")

	// Spend and budgets per client, as /v1/status has them.
	require.NotNil(t, st.Spend)
	var team *admit.ClientSpend
	for i := range st.Spend.Clients {
		if st.Spend.Clients[i].Client == "team" {
			team = &st.Spend.Clients[i]
		}
	}
	require.NotNil(t, team, "the team's spend in /v1/status")
	require.Positive(t, team.Day.SpentUSD)
	day := `#spend tr[data-client="team"] [data-k="day"] `
	require.Equal(t, "$5.00", text(day+`[data-v="limit"]`))
	require.Equal(t, fmt.Sprintf("$%.4f", team.Day.SpentUSD), text(day+`[data-v="spent"]`))
	require.Equal(t, fmt.Sprintf("$%.2f", *team.Day.RemainingUSD), text(day+`[data-v="remaining"]`))
	require.Contains(t, text(`#spend tr[data-client="team"] [data-k="total"]`), "(no limit)")

	// Every refusal with its reason: the team's model refused by its
	// allowed models.
	refusal := `#waits tr[data-kind="refused"][data-reason="access"][data-client="team"]`
	require.Contains(t, text(refusal), `client team may not use model "claude-y"`)
	require.Contains(t, text(refusal+` td.num`), "1")

	// One node: no cluster card. A cluster section (as a node sharing its
	// quota reports it) is drawn with one row per node and says which
	// node this is; read in the same turn, before the next poll redraws.
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#cluster").hidden`))
	require.NoError(t, err)
	require.True(t, hidden, "a single node shows no cluster card")
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		renderCluster({node: "a", leader: true, degraded: true, upstreams: [{name: "claude", share: 0.5, slots: 2, fallback: true,
			nodes: [{node: "a", share: 0.5, slots: 2, demand: 3}, {node: "b", share: 0.5, slots: 2, demand: 1}]}]}, new Date());
		const rows = document.querySelectorAll("#clustershares tbody tr[data-node]");
		return [document.querySelector("#cluster").hidden, rows.length, document.querySelector("#clusternode").textContent,
			rows[0].textContent.replace(/\s+/g, " ").trim()].join("|");
	})()`))
	require.NoError(t, err)
	parts := strings.Split(shown, "|")
	require.Equal(t, []string{"false", "2"}, parts[:2], shown)
	require.Contains(t, parts[2], "this node a (leader)")
	require.Contains(t, parts[2], "DEGRADED")
	require.Contains(t, parts[3], "50.0%")
	require.Contains(t, parts[3], "fallback share")

	// Work that could wait, per upstream: none on this gateway (nothing
	// routed, no flex answer), as /v1/status has it; a status whose
	// upstream routed lines and got flex answers (as such a gateway
	// reports it) is drawn with their cost and savings, read in the same
	// turn, before the next poll redraws.
	require.Nil(t, u.BatchRoute)
	require.Contains(t, text(`#savings tbody`), "nothing routed")
	saved, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		renderSavings({upstreams: [{name: "claude"}, {name: "gpt", batch_route: {lines_succeeded: 120, lines_released: 3, lines_errored: 1,
			lines_held: 2, spent_usd: 1.5, standard_usd: 3, flex_answers: 4, flex_spent_usd: 0.25, flex_standard_usd: 0.5, flex_saved_usd: 0.25,
			saved_usd: 1.75}}]});
		const row = document.querySelector('#savings tr[data-upstream="gpt"]');
		return [document.querySelectorAll("#savings tbody tr[data-upstream]").length, ...["lines", "released", "held", "batch-cost",
			"flex-answers", "flex-cost", "standard", "saved"].map((k) => row.querySelector('[data-k="' + k + '"]').textContent)].join("|");
	})()`))
	require.NoError(t, err)
	require.Equal(t, "1|120|4|2|$1.50|4|$0.2500|$3.50|$1.75", saved, "an upstream's routing cost and savings")

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := artifactsDir(t)
	path := filepath.Join(dir, "dashboard.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("dashboard screenshot: %s (%d bytes)", path, len(shot))

	// Requeue the dead job from the DLQ: it leaves the DLQ (queued, held by
	// the pause).
	// Clicked from the page's script: the tables are redrawn every poll,
	// so a node found a moment before may be gone.
	click := func(sel string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`(() => { const b = document.querySelector(%q); if (b) b.click(); return !!b; })()`, sel),
			chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "clicked %s", sel)
	}
	click(`#dlq button[data-id="` + dead.ID.String() + `"]`)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`!document.querySelector('#dlq [data-job="`+dead.ID.String()+`"]')`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the job left the DLQ on the page")
	code, body = call(t, "GET", base+"/v1/jobs/"+dead.ID.String(), "ops-key", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"state":"queued"`)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#jobs [data-job="`+dead.ID.String()+`"]') !== null`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "and shows among the jobs in flight")

	// The breaker buttons: hold it open, then reset it.
	click(card + `button[data-action="breaker-open"]`)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`(document.querySelector('[data-upstream="claude"] [data-k="breaker"]')||{}).textContent === "open (held)"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	click(card + `button[data-action="breaker-reset"]`)
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`(document.querySelector('[data-upstream="claude"] [data-k="breaker"]')||{}).textContent === "closed"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	code, body = call(t, "GET", base+"/v1/status", "ops-key", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"cause": "operator reset"`)
}
