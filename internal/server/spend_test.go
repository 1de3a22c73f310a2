package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/opsview"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The spend tests price one model at round numbers: $10 per million input
// tokens, $100 per million output tokens (cache prices default to input).
var spendPrices = pricing.Config{Models: map[string]pricing.Price{"claude-x": {Input: 10, Output: 100}, "gpt-x": {Input: 10, Output: 100}}}

// worstOf is the worst case the gateway reserves for body, computed here
// from the estimate and the price (not from the gateway's accounting).
func worstOf(t *testing.T, p llm.Protocol, body string) pricing.Amount {
	t.Helper()
	c, err := provider.Estimate(p, []byte(body))
	require.NoError(t, err)
	return pricing.FromDollars((float64(c.InputTokens)*10 + float64(c.OutputTokens)*100) / 1e6)
}

func budgetClient(b admit.Budget) []clients.Config {
	return []clients.Config{{Name: "team", Key: "ck-team", Budget: b}, {Name: "free", Key: "ck-free"},
		{Name: "ops", Key: "ck-admin", Role: clients.RoleAdmin}}
}

// readStatus reads /v1/status as an admin (every client's spend); key
// must be a client's, which sees its own spend at most.
func readStatus(t *testing.T, url, key string) opsview.StatusResponse {
	t.Helper()
	code, body := call(t, "GET", url+"/v1/status", key, "")
	require.Equal(t, http.StatusOK, code, string(body))
	var own opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &own))
	if own.Spend != nil {
		require.LessOrEqual(t, len(own.Spend.Clients), 1, "a client sees its own spend only: %s", body)
	}
	code, body = call(t, "GET", url+"/v1/status", "ck-admin", "")
	require.Equal(t, http.StatusOK, code, string(body))
	var st opsview.StatusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.NotNil(t, st.Spend)
	return st
}

func clientSpend(t *testing.T, st opsview.StatusResponse, name string) admit.ClientSpend {
	t.Helper()
	for _, c := range st.Spend.Clients {
		if c.Client == name {
			return c
		}
	}
	t.Fatalf("no spend for client %s in %+v", name, st.Spend)
	return admit.ClientSpend{}
}

// TestBudgetRefusalShapes: with fake engines (each success charged its
// worst case: the fake reports no usage), the daily budget refuses the
// request that would not fit with a 429 naming the budget and its reset;
// the total cap answers 402; a request too large for the budget 400; in
// both protocols' shapes. The refusal is logged once.
func TestBudgetRefusalShapes(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	worst := worstOf(t, llm.Anthropic, anthropicBody) // max_tokens 64
	day := 2.5 * worst.Dollars()
	ts := newLoggedTestServer(t, budgetClient(admit.Budget{Day: day}), log, func(c *Config) { c.Prices = spendPrices })
	h := map[string]string{"x-api-key": "ck-team"}
	for range 2 {
		r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
		require.Equal(t, http.StatusOK, r.StatusCode, string(body))
	}
	for range 3 {
		r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
		require.Equal(t, http.StatusTooManyRequests, r.StatusCode)
		msg := requireProviderError(t, llm.Anthropic, body, "rate_limit_error")
		require.Contains(t, msg, "daily budget")
		require.Contains(t, msg, "client team")
		require.Contains(t, msg, "2026-03-02T00:00:00Z")
		// The fake clock is at 12:00: the day resets in 12 hours.
		require.Equal(t, strconv.Itoa(12*3600), r.Header.Get("Retry-After"))
		require.Equal(t, "false", r.Header.Get("X-Should-Retry"))
	}
	require.Len(t, ts.a.calls(), 2, "refused requests never reach the engine")
	require.Equal(t, 1, strings.Count(logs.String(), "budget exhausted"), "logged once, not per request")
	require.Contains(t, logs.String(), `"cost_usd":`+strconv.FormatFloat(worst.Dollars(), 'g', -1, 64))

	// Another client is not affected.
	r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "ck-free"})
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))

	// No way around the meter: a budgeted client's billable pass-through
	// is refused; reads and token counting still pass.
	r, body = ts.do(t, "POST", "/o/v1/images/generations", `{"model":"gpt-image-1","prompt":"hi"}`, h)
	require.Equal(t, http.StatusForbidden, r.StatusCode)
	require.Contains(t, requireProviderError(t, llm.OpenAI, body, "permission_error"), "spend budget")
	r, _ = ts.do(t, "POST", "/a/v1/messages/count_tokens", anthropicBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode)
	r, _ = ts.do(t, "GET", "/a/v1/models", "", h)
	require.Equal(t, http.StatusOK, r.StatusCode)
	r, _ = ts.do(t, "POST", "/o/v1/responses", `{"model":"gpt-x","input":"hi"}`, map[string]string{"x-api-key": "ck-free"})
	require.Equal(t, http.StatusOK, r.StatusCode)

	// A total cap is a 402, in the OpenAI shape on an OpenAI upstream.
	ts = newTestServer(t, budgetClient(admit.Budget{Total: worstOf(t, llm.OpenAI, openAIBody).Dollars() * 1.5}),
		func(c *Config) { c.Prices = spendPrices })
	r, body = ts.do(t, "POST", "/o/v1/chat/completions", openAIBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))
	r, body = ts.do(t, "POST", "/o/v1/chat/completions", openAIBody, h)
	require.Equal(t, http.StatusPaymentRequired, r.StatusCode)
	require.Contains(t, requireProviderError(t, llm.OpenAI, body, "insufficient_quota"), "total budget")
	require.Empty(t, r.Header.Get("Retry-After"), "a hard cap gives no retry time")
	// In Anthropic's shape on an Anthropic upstream.
	ts = newTestServer(t, budgetClient(admit.Budget{Total: worst.Dollars() * 1.5}), func(c *Config) { c.Prices = spendPrices })
	r, _ = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode)
	r, body = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusPaymentRequired, r.StatusCode)
	requireProviderError(t, llm.Anthropic, body, "billing_error")

	// A request whose worst case alone exceeds the budget: 400.
	ts = newTestServer(t, budgetClient(admit.Budget{Month: worst.Dollars() / 2}), func(c *Config) { c.Prices = spendPrices })
	r, body = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "invalid_request_error"), "lower max_tokens")

	// An unpriced model with prices.unknown: refuse: 400 for a client with
	// a budget, served for one without.
	ts = newTestServer(t, budgetClient(admit.Budget{Day: 100}), func(c *Config) {
		c.Prices = pricing.Config{Unknown: pricing.UnknownRefuse, NoShipped: true}
	})
	r, body = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	require.Contains(t, requireProviderError(t, llm.Anthropic, body, "invalid_request_error"), "claude-x")
	r, _ = ts.do(t, "POST", "/a/v1/messages", anthropicBody, map[string]string{"x-api-key": "ck-free"})
	require.Equal(t, http.StatusOK, r.StatusCode)
}

// TestBudgetRefundedOnFailure: a request the engine gives up on, or a
// provider error passed through, costs nothing: its reservation is
// refunded, so the budget is whole again.
func TestBudgetRefundedOnFailure(t *testing.T) {
	t.Parallel()
	worst := worstOf(t, llm.Anthropic, anthropicBody)
	ts := newTestServer(t, budgetClient(admit.Budget{Day: worst.Dollars()}), func(c *Config) { c.Prices = spendPrices })
	var fail sync.Mutex
	mode := "gave_up"
	ts.a.do = func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		fail.Lock()
		defer fail.Unlock()
		acc := ts.srv.admit.Account("team", ts.clock.Now())
		require.Equal(t, worst, acc.Day.Reserved, "reserved before the engine sees it")
		switch mode {
		case "gave_up":
			return nil, &dispatch.Error{Reason: dispatch.ErrRetriesExhausted, Status: 529, Message: "overloaded", Attempts: 3}
		case "provider_error":
			resp := okResponse(`{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`)
			resp.StatusCode = http.StatusBadRequest
			resp.Outcome = llm.Outcome{Kind: llm.ClientError, Status: http.StatusBadRequest}
			return resp, nil
		}
		return okResponse(`{"ok":true}`), nil
	}
	h := map[string]string{"x-api-key": "ck-team"}
	r, _ := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, 529, r.StatusCode)
	fail.Lock()
	mode = "provider_error"
	fail.Unlock()
	r, _ = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	acc := ts.srv.admit.Account("team", ts.clock.Now())
	require.Zero(t, acc.Day.Spent)
	require.Zero(t, acc.Day.Reserved)
	// The whole budget is still there for a request that succeeds.
	fail.Lock()
	mode = "ok"
	fail.Unlock()
	r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))
	require.Equal(t, worst, ts.srv.admit.Account("team", ts.clock.Now()).Day.Spent)
}

// spendGateway starts a mock and a gateway in front of it with the spend
// prices, the given clients and store.
func spendGateway(t *testing.T, m *mock.Server, store string, clients []clients.Config, log ...*slog.Logger) *Server {
	t.Helper()
	lg := discardLogger()
	if len(log) > 0 {
		lg = log[0]
	}
	g, err := New(Config{Store: store, Listen: "127.0.0.1:0", Prices: spendPrices, Clients: clients,
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up",
			Limits: upcfg.Limits{MaxConcurrency: 64}}}},
		WithLogger(lg))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	return g
}

func startSpendMock(t *testing.T) *mock.Server {
	t.Helper()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 40, Max: 64}, Seed: 11})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	return m
}

const raceBody = `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"race for the last dollars"}]}`

// TestBudgetRaceOverTheMock: 60 concurrent requests over HTTP race for a
// budget worth about 10 of them against the mock. The spend, priced here
// from the usage each answer reported, never exceeds the budget by more
// than one request's worst case, the gateway's own account agrees with
// it, every refusal is a 429 in Anthropic's shape, and the spend survives
// a restart on the same SQLite file.
func TestBudgetRaceOverTheMock(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	store := testStore(t)
	worst := worstOf(t, llm.Anthropic, raceBody)
	limit := pricing.FromDollars(10.5 * worst.Dollars())
	clients := budgetClient(admit.Budget{Day: limit.Dollars()})
	g := spendGateway(t, m, store, clients)
	base := "http://" + g.Addr()

	var mu sync.Mutex
	var spent pricing.Amount
	ok, refused := 0, 0
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			code, body := call(t, "POST", base+"/claude/v1/messages", "ck-team", raceBody)
			mu.Lock()
			defer mu.Unlock()
			switch code {
			case http.StatusOK:
				ok++
				var r struct{ Usage llm.Usage }
				require.NoError(t, json.Unmarshal(body, &r))
				spent += pricing.FromDollars((float64(r.Usage.InputTokens)*10 + float64(r.Usage.OutputTokens)*100) / 1e6)
			case http.StatusTooManyRequests:
				refused++
				require.Contains(t, requireProviderError(t, llm.Anthropic, body, "rate_limit_error"), "daily budget")
			default:
				t.Errorf("unexpected %d: %s", code, body)
			}
		})
	}
	wg.Wait()
	t.Logf("budget $%.6f (%.1f worst cases of $%.6f): %d served, %d refused, spent $%.6f", limit.Dollars(),
		float64(limit)/float64(worst), worst.Dollars(), ok, refused, spent.Dollars())
	require.Positive(t, refused)
	require.GreaterOrEqual(t, ok, 10, "at least the budget's worth of worst cases is served")
	require.LessOrEqual(t, spent, limit+worst, "never more than one request's worst case over")

	// The last answers' bodies may still be settling as their clients
	// finish reading.
	var team admit.ClientSpend
	require.Eventually(t, func() bool {
		team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
		return team.ReservedUSD == 0 && team.By[0].Requests == int64(ok)
	}, 10*time.Second, 10*time.Millisecond)
	require.InDelta(t, spent.Dollars(), team.Day.SpentUSD, 1e-9, "the gateway's account is the usage's")
	require.InDelta(t, spent.Dollars(), team.Total.SpentUSD, 1e-9)
	require.Zero(t, team.ReservedUSD)
	require.NotNil(t, team.Day.LimitUSD)
	require.Len(t, team.By, 1)
	require.Equal(t, admit.ModelSpend{Upstream: "claude", Model: "claude-x", USD: team.By[0].USD, Requests: int64(ok)}, team.By[0])

	_, metrics := call(t, "GET", base+"/metrics", "ck-admin", "")
	require.Contains(t, string(metrics), `sluice_spend_usd_total{client="team",model="claude-x",upstream="claude"}`)
	require.Contains(t, string(metrics), `sluice_budget_remaining_usd{client="team",window="day"}`)
	require.Contains(t, string(metrics), `sluice_spend_reserved_usd{client="team"} 0`)

	// Restart on the same file: the spend is still there, and still
	// refuses.
	require.NoError(t, g.Stop(context.Background()))
	g = spendGateway(t, m, store, clients)
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base = "http://" + g.Addr()
	team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
	require.InDelta(t, spent.Dollars(), team.Day.SpentUSD, 1e-9, "spend survives the restart")
	require.Equal(t, int64(ok), team.By[0].Requests)
	if limit-spent < worst {
		code, body := call(t, "POST", base+"/claude/v1/messages", "ck-team", raceBody)
		require.Equal(t, http.StatusTooManyRequests, code, string(body))
	}
	code, body := call(t, "POST", base+"/claude/v1/messages", "ck-free", raceBody)
	require.Equal(t, http.StatusOK, code, string(body))
}

// TestBudgetAppliesToJobs: a job's call reserves against its client's
// budget like a live request; a total cap kills the job with the 402
// refusal in its history, without calling the provider.
func TestBudgetAppliesToJobs(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	worst := worstOf(t, llm.Anthropic, raceBody)
	logs := &syncBuffer{}
	g := spendGateway(t, m, testStore(t), budgetClient(admit.Budget{Total: 1.5 * worst.Dollars()}),
		slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	submit := func() string {
		code, body := call(t, "POST", base+"/v1/jobs", "ck-team", `{"upstream":"claude","request":`+raceBody+`}`)
		require.Equal(t, http.StatusAccepted, code, string(body))
		var j struct {
			ID json.Number `json:"id"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		return j.ID.String()
	}
	wait := func(id string) string {
		code, body := call(t, "GET", base+"/v1/jobs/"+id+"?wait=20s", "ck-team", "")
		require.Equal(t, http.StatusOK, code, string(body))
		return string(body)
	}
	first := wait(submit())
	require.Contains(t, first, `"state":"succeeded"`)
	calls := m.Stats().Overall.ByStatus["200"]
	second := wait(submit())
	require.Contains(t, second, `"state":"dead"`)
	require.Contains(t, second, "total budget")
	require.Contains(t, second, `"status":402`)
	require.Equal(t, calls, m.Stats().Overall.ByStatus["200"], "the refused job never reached the provider")
	var team admit.ClientSpend
	require.Eventually(t, func() bool {
		team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
		return team.ReservedUSD == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Positive(t, team.Total.SpentUSD)
	require.LessOrEqual(t, team.Total.SpentUSD, worst.Dollars())
	// The attempt's log line says what it cost.
	var attempt struct {
		Msg     string  `json:"msg"`
		Outcome string  `json:"outcome"`
		CostUSD float64 `json:"cost_usd"`
	}
	found := false
	for _, line := range strings.Split(logs.String(), "\n") {
		if json.Unmarshal([]byte(line), &attempt) == nil && attempt.Msg == "job attempt" && attempt.Outcome == "success" {
			require.InDelta(t, team.Total.SpentUSD, attempt.CostUSD, 1e-9)
			found = true
		}
	}
	require.True(t, found, "no job attempt line in %s", logs.String())
}

func TestBudgetConfig(t *testing.T) {
	t.Parallel()
	base := "upstreams: [{name: a, protocol: anthropic, api_key: k}]\n"
	cfg, err := ParseConfig([]byte(base+`clients: [{name: t, key: k1, budget: {day: 5, month: 100, total: 1000}}]
prices:
  unknown: refuse
  models:
    my-model: {input: 1, output: 2}
`), nil)
	require.NoError(t, err)
	require.Equal(t, admit.Budget{Day: 5, Month: 100, Total: 1000}, cfg.Clients[0].Budget)
	require.Equal(t, pricing.UnknownRefuse, cfg.Prices.Unknown)
	for doc, want := range map[string]string{
		"clients: [{name: t, key: k1, budget: {day: -1}}]\n":           "clients[0].budget.day",
		"clients: [{name: t, key: k1, budget: {totl: 1}}]\n":           "clients[0].budget.totl: unknown field; did you mean total?",
		"prices: {unknown: maybe}\n":                                   "prices.unknown",
		"prices: {models: {m: {input: 1, output: -2}}}\n":              "prices.models.m.output",
		"prices: {fallback: {input: .nan}}\n":                          "prices.fallback.input",
		"clients: [{name: t, key: k1, budget: {month: 1e12}}]\n":       "clients[0].budget.month",
		fmt.Sprintf("prices: {models: {m: {input: %d}}}\n", 1_000_000): "prices.models.m.input",
	} {
		_, err := ParseConfig([]byte(base+doc), nil)
		require.ErrorContains(t, err, want, doc)
	}
}

// TestBudgetChargesStreams: a streamed answer is charged from the usage
// its events reported, once the stream ends, and nothing stays reserved;
// an OpenAI stream that did not ask for usage is asked for it (and the
// chunk stripped), so it is charged too.
func TestBudgetChargesStreams(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: spendPrices,
		Clients: budgetClient(admit.Budget{Day: 10}),
		Upstreams: []upcfg.Config{
			{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"},
			{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-up"},
		}}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	code, body := call(t, "POST", base+"/claude/v1/messages", "ck-team",
		`{"model":"claude-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"stream it"}]}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), "message_stop")
	var team admit.ClientSpend
	require.Eventually(t, func() bool {
		team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
		return team.ReservedUSD == 0
	}, 10*time.Second, 10*time.Millisecond)
	anthropicSpent := team.Day.SpentUSD
	require.Positive(t, anthropicSpent)
	require.LessOrEqual(t, anthropicSpent, worstOf(t, llm.Anthropic, raceBody).Dollars())
	require.Zero(t, team.ReservedUSD)

	code, body = call(t, "POST", base+"/gpt/v1/chat/completions", "ck-team",
		`{"model":"gpt-x","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"stream it"}]}`)
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotContains(t, string(body), `"usage":{`, "the usage chunk the gateway asked for is stripped")
	require.Eventually(t, func() bool {
		team = clientSpend(t, readStatus(t, base, "ck-team"), "team")
		return team.ReservedUSD == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, team.Day.SpentUSD, anthropicSpent)
	require.Zero(t, team.ReservedUSD)
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBudgetIsUsedUpOverTheMock: 30 clients keep retrying the "pending"
// 429 (the budget held by requests in flight) until they are served or
// told the budget is exhausted: the budget is then used to within one
// request's worst case, and never exceeded by more than one.
func TestBudgetIsUsedUpOverTheMock(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	worst := worstOf(t, llm.Anthropic, raceBody)
	limit := pricing.FromDollars(20.5 * worst.Dollars())
	g := spendGateway(t, m, testStore(t), budgetClient(admit.Budget{Day: limit.Dollars()}))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	var mu sync.Mutex
	var spent pricing.Amount
	served, pending := 0, 0
	var wg sync.WaitGroup
	for range 30 {
		wg.Go(func() {
			for tries := 0; tries < 500; tries++ {
				code, body := call(t, "POST", base+"/claude/v1/messages", "ck-team", raceBody)
				if code == http.StatusOK {
					var r struct{ Usage llm.Usage }
					require.NoError(t, json.Unmarshal(body, &r))
					mu.Lock()
					served++
					spent += pricing.FromDollars((float64(r.Usage.InputTokens)*10 + float64(r.Usage.OutputTokens)*100) / 1e6)
					mu.Unlock()
					continue // and ask again
				}
				require.Equal(t, http.StatusTooManyRequests, code, string(body))
				if !strings.Contains(string(body), "held by requests in flight") {
					return // exhausted: done
				}
				mu.Lock()
				pending++
				mu.Unlock()
				// Ask again once a hold may have gone (a request in flight
				// settled, or none holds anything), not after the 2 s hint.
				held := g.admit.Account("team", g.clock.Now()).Day
				assert.Eventually(t, func() bool {
					now := g.admit.Account("team", g.clock.Now()).Day
					return now.Reserved == 0 || now.Reserved < held.Reserved || now.Spent > held.Spent
				}, 10*time.Second, time.Millisecond, "a hold of a request in flight is released")
			}
			t.Error("never told the budget is exhausted")
		})
	}
	wg.Wait()
	t.Logf("budget $%.6f, worst case $%.6f: %d served, %d pending refusals retried, spent $%.6f (%.1f%% of the budget)",
		limit.Dollars(), worst.Dollars(), served, pending, spent.Dollars(), 100*spent.Dollars()/limit.Dollars())
	require.LessOrEqual(t, spent, limit+worst)
	require.GreaterOrEqual(t, spent, limit-worst, "the budget is used up to within one worst case")
}

// TestReloadAppliesBudgets: a reload with a smaller budget refuses at once
// what the spend already made no longer leaves room for.
func TestReloadAppliesBudgets(t *testing.T) {
	t.Parallel()
	worst := worstOf(t, llm.Anthropic, anthropicBody)
	ts := newTestServer(t, budgetClient(admit.Budget{Day: 10}), func(c *Config) { c.Prices = spendPrices })
	h := map[string]string{"x-api-key": "ck-team"}
	r, _ := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode)
	cfg := ts.srv.Config()
	cfg.Clients = budgetClient(admit.Budget{Day: 1.5 * worst.Dollars()})
	require.NoError(t, ts.srv.Reload(cfg))
	r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode, string(body))
}

// TestBudgetRefusalOnTheDashboard: a request refused for its client's
// budget is in /v1/status's admission section, which the dashboard's
// "Waits and refusals" table renders (app.js renderWaits reads kind,
// reason, client, upstream, count and last_message): a refused row with
// reason budget and the refusal's message, for an admin and for the
// client itself, and none for another client (issue 27: the dashboard
// showed no reason for budget refusals).
func TestBudgetRefusalOnTheDashboard(t *testing.T) {
	t.Parallel()
	worst := worstOf(t, llm.Anthropic, anthropicBody)
	ts := newTestServer(t, budgetClient(admit.Budget{Day: 1.5 * worst.Dollars()}), func(c *Config) { c.Prices = spendPrices })
	h := map[string]string{"x-api-key": "ck-team"}
	r, body := ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
	require.Equal(t, http.StatusOK, r.StatusCode, string(body))
	for range 2 {
		r, body = ts.do(t, "POST", "/a/v1/messages", anthropicBody, h)
		require.Equal(t, http.StatusTooManyRequests, r.StatusCode, string(body))
	}
	type row struct {
		Kind        string `json:"kind"`
		Reason      string `json:"reason"`
		Client      string `json:"client"`
		Upstream    string `json:"upstream"`
		Count       int    `json:"count"`
		LastMessage string `json:"last_message"`
	}
	rows := func(key string) []row {
		r, body := ts.do(t, "GET", "/v1/status", "", map[string]string{"x-api-key": key})
		require.Equal(t, http.StatusOK, r.StatusCode, string(body))
		var st struct {
			Admission []row `json:"admission"`
		}
		require.NoError(t, json.Unmarshal(body, &st), string(body))
		return st.Admission
	}
	for _, key := range []string{"ck-admin", "ck-team"} {
		got := rows(key)
		require.Len(t, got, 1, "as %s: %+v", key, got)
		require.Equal(t, "refused", got[0].Kind)
		require.Equal(t, "budget", got[0].Reason)
		require.Equal(t, "team", got[0].Client)
		require.Equal(t, "a", got[0].Upstream)
		require.Equal(t, 2, got[0].Count)
		require.Contains(t, got[0].LastMessage, "daily budget")
		require.Contains(t, got[0].LastMessage, "client team")
	}
	require.Empty(t, rows("ck-free"), "another client sees none of team's refusals")
}
