package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/pricing"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// hangUpRoute is a streaming route a client hangs up on: its path under
// the upstream, the body it posts, and how its content deltas begin.
type hangUpRoute struct {
	protocol llm.Protocol
	path     string
	body     string
	delta    func(line string) bool
}

var (
	hangUpMessages = hangUpRoute{llm.Anthropic, "/v1/messages",
		`{"model":"claude-x","max_tokens":800,"stream":true,"messages":[{"role":"user","content":"write at length"}]}`,
		func(l string) bool { return strings.HasPrefix(l, "event: content_block_delta") }}
	hangUpChat = hangUpRoute{llm.OpenAI, "/v1/chat/completions",
		`{"model":"gpt-x","max_tokens":800,"stream":true,"messages":[{"role":"user","content":"write at length"}]}`,
		func(l string) bool {
			return strings.HasPrefix(l, "data: ") && strings.Contains(l, `"delta":{"content":"`)
		}}
	hangUpResponses = hangUpRoute{llm.OpenAI, "/v1/responses",
		`{"model":"gpt-x","max_output_tokens":800,"stream":true,"input":"write at length"}`,
		func(l string) bool { return strings.HasPrefix(l, "event: response.output_text.delta") }}
)

// hangUp posts a stream to url with key and reads it until it has seen
// deltas content deltas, then closes the connection (a chat UI's stop
// button). It returns the status, and how many deltas it read.
func hangUp(t *testing.T, url, key string, deltas int) (int, int) {
	t.Helper()
	return hangUpOn(t, hangUpMessages, url, key, deltas)
}

// hangUpOn is hangUp on route rt (url is the upstream's base plus the route).
func hangUpOn(t *testing.T, rt hangUpRoute, url, key string, deltas int) (int, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(rt.body))
	require.NoError(t, err)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, 0
	}
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	for seen < deltas && sc.Scan() {
		if rt.delta(sc.Text()) {
			seen++
		}
	}
	return resp.StatusCode, seen
}

// TestAbandonedStreamsAreChargedWhatTheProviderBills: a budgeted client
// that closes 40 streams after 95 % of their content (Anthropic Messages,
// OpenAI Chat Completions and Responses) is charged within 5 % of what the
// provider billed (the engine reads each stream on to the usage it
// reports: OpenAI's include_usage chunk, which the gateway asks for), is
// refused once its budget is spent, and the same hang-ups on a tight
// output quota (Anthropic OTPM, OpenAI TPM) bring no provider 429: the
// quota is settled with what the provider counted, not with the little
// the stream had reported when its client left.
// sluice_streams_abandoned_total counts each as settled by its usage.
func TestAbandonedStreamsAreChargedWhatTheProviderBills(t *testing.T) {
	t.Parallel()
	// 800 output tokens a stream, 1 ms each; a 10 s bucket of 120,000 a
	// minute: 25 streams fill it (OpenAI's TPM counts the ~10 input
	// tokens too).
	for _, tc := range []struct {
		name    string
		route   hangUpRoute
		limits  upcfg.Limits
		reserve string // what a request reserves of the output quota
		mock    mock.Limits
	}{
		{"anthropic messages", hangUpMessages, upcfg.Limits{OutputTokensPerMinute: 120_000, MaxConcurrency: 8},
			upcfg.OutputReservationLearned, mock.Limits{OTPM: 120_000}},
		// OpenAI reserves max_tokens against TPM, as the provider does.
		{"openai chat completions", hangUpChat, upcfg.Limits{TokensPerMinute: 120_000, MaxConcurrency: 8},
			upcfg.OutputReservationMaxTokens, mock.Limits{TPM: 120_000}},
		{"openai responses", hangUpResponses, upcfg.Limits{TokensPerMinute: 120_000, MaxConcurrency: 8},
			upcfg.OutputReservationMaxTokens, mock.Limits{TPM: 120_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testAbandonedStreamsCharged(t, tc.route, tc.limits, tc.reserve, tc.mock)
		})
	}
}

func testAbandonedStreamsCharged(t *testing.T, rt hangUpRoute, limits upcfg.Limits, reserve string, mockLimits mock.Limits) {
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 800, Max: 800},
		PerToken: time.Millisecond, Limits: mockLimits, BurstSeconds: 10, OTPMMode: mock.OTPMRealtime, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	// claude-x and gpt-x: $10 and $100 per million tokens: a stream is about $0.08.
	const budget = 3.5
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: spendPrices,
		Clients: []clients.Config{{Name: "chat", Key: "ck-chat", Budget: admit.Budget{Total: budget}},
			{Name: "ops", Key: "ck-ops", Role: clients.RoleAdmin}},
		Upstreams: []upcfg.Config{{Name: "up", Protocol: rt.protocol, BaseURL: m.URL(), APIKey: "sk-up",
			Limits: limits, BurstSeconds: 10, OutputReservation: reserve}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	url := "http://" + g.Addr() + "/up" + rt.path

	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 40 {
		wg.Go(func() {
			code, seen := hangUpOn(t, rt, url, "ck-chat", 760)
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			if code == http.StatusOK {
				require.Equal(t, 760, seen)
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[int]int{200: 40}, codes)
	// The engine has read every stream on: the provider's bill is known.
	require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 30*time.Second, 10*time.Millisecond)
	stats := m.Stats().Overall
	billed := pricing.FromDollars((float64(stats.Admitted.InputTokens)*10 + float64(stats.Admitted.OutputTokens)*100) / 1e6)
	require.EqualValues(t, 40*800, stats.Admitted.OutputTokens, "the provider produced (and bills) every stream whole")
	var charged pricing.Amount
	require.Eventually(t, func() bool {
		charged = g.admit.Account("chat", g.clock.Now()).Total.Spent
		return charged > 0 && charged >= billed*95/100
	}, 30*time.Second, 10*time.Millisecond, "charged %s for a bill of %s", charged, billed)
	t.Logf("provider billed %s (%d output tokens), the client was charged %s; 429s %d", billed, stats.Admitted.OutputTokens, charged,
		stats.ByStatus["429"])
	require.InDelta(t, billed.Dollars(), charged.Dollars(), 0.05*billed.Dollars(), "within 5 %% of the provider's bill")
	require.Zero(t, stats.ByStatus["429"], "the output quota was settled with what the provider counted")
	require.Eventually(t, func() bool {
		return strings.Contains(scrapeWith(t, g, "ck-ops"), `sluice_streams_abandoned_total{settled="usage",upstream="up"} 40`+"\n")
	}, 30*time.Second, 10*time.Millisecond, "every hang-up counted, settled by its usage")

	// The budget is spent by hang-ups too: past it, refused (429 while
	// streams being read on still hold their worst case, 402 once the
	// total is spent).
	refused := false
	for range 20 {
		code, _ := hangUpOn(t, rt, url, "ck-chat", 760)
		if code == http.StatusTooManyRequests {
			require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 30*time.Second, 10*time.Millisecond)
			continue
		}
		if code != http.StatusOK {
			require.Equal(t, http.StatusPaymentRequired, code, "refused by its total budget")
			refused = true
			break
		}
	}
	require.True(t, refused, "the hang-ups spent the budget and the client was refused")
	require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 30*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, g.admit.Account("chat", g.clock.Now()).Total.Spent.Dollars(), budget+0.1,
		fmt.Sprintf("over-spent by at most one request's worst case (%s)", g.admit.Account("chat", g.clock.Now()).Total.Spent))
}

// scrapeWith reads GET /metrics from the running gateway g with key.
func scrapeWith(t *testing.T, g *Server, key string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+g.Addr()+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return string(b)
}

// TestAbandonedStreamLogLine: the log line of a stream its client left
// says so (outcome abandoned, not success) and carries the tokens the
// provider billed once the engine has read the stream on, not the few the
// client saw (issue 24: it read "outcome: success, tokens_out: 0").
func TestAbandonedStreamLogLine(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 300, Max: 300},
		PerToken: time.Millisecond, Seed: 5})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	log, logs := capturedLogger(slog.LevelInfo)
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: spendPrices,
		Clients:   []clients.Config{{Name: "chat", Key: "ck-chat"}},
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up"}}},
		WithLogger(log))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })

	code, seen := hangUp(t, "http://"+g.Addr()+"/claude/v1/messages", "ck-chat", 20)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 20, seen)
	line := logs.waitLines(t, "request", 1)[0]
	require.Equal(t, "abandoned", line["outcome"], line)
	require.EqualValues(t, http.StatusOK, line["status"], line)
	billed := m.Stats().Overall.Admitted.OutputTokens
	require.EqualValues(t, 300, billed)
	require.EqualValues(t, billed, line["tokens_out"], "the tokens the provider billed: %v", line)
	require.Positive(t, line["tokens_in"], line)
	require.Positive(t, line["cost_usd"], line)
}
