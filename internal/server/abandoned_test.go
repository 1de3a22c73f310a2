package server

import (
	"bufio"
	"context"
	"fmt"
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

// hangUp posts a stream to url with key and reads it until it has seen
// deltas content deltas, then closes the connection (a chat UI's stop
// button). It returns the status, and how many deltas it read.
func hangUp(t *testing.T, url, key string, deltas int) (int, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	body := `{"model":"claude-x","max_tokens":800,"stream":true,"messages":[{"role":"user","content":"write at length"}]}`
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
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
		if strings.HasPrefix(sc.Text(), "event: content_block_delta") {
			seen++
		}
	}
	return resp.StatusCode, seen
}

// TestAbandonedStreamsAreChargedWhatTheProviderBills: a budgeted client
// that closes 40 streams after 95 % of their content is charged within 5 %
// of what the provider billed (the engine reads each stream on to the
// usage it reports), is refused once its budget is spent, and the same
// hang-ups on a tight output quota bring no provider 429: the quota is
// settled with what the provider counted, not with the little the stream
// had reported when its client left.
func TestAbandonedStreamsAreChargedWhatTheProviderBills(t *testing.T) {
	t.Parallel()
	// 800 output tokens a stream, 1 ms each; OTPM 120,000 in a 10 s
	// bucket: 25 streams fill it.
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 800, Max: 800},
		PerToken: time.Millisecond, Limits: mock.Limits{OTPM: 120_000}, BurstSeconds: 10, OTPMMode: mock.OTPMRealtime, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	// claude-x: $10 and $100 per million tokens: a stream is about $0.08.
	const budget = 3.5
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: spendPrices,
		Clients: []clients.Config{{Name: "chat", Key: "ck-chat", Budget: admit.Budget{Total: budget}}},
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-up",
			Limits: upcfg.Limits{OutputTokensPerMinute: 120_000, MaxConcurrency: 8}, BurstSeconds: 10,
			OutputReservation: upcfg.OutputReservationLearned}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	url := "http://" + g.Addr() + "/claude/v1/messages"

	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 40 {
		wg.Go(func() {
			code, seen := hangUp(t, url, "ck-chat", 760)
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
	var charged pricing.Amount
	require.Eventually(t, func() bool {
		charged = g.admit.Account("chat", g.clock.Now()).Total.Spent
		return charged > 0 && charged >= billed*95/100
	}, 30*time.Second, 10*time.Millisecond, "charged %s for a bill of %s", charged, billed)
	t.Logf("provider billed %s (%d output tokens), the client was charged %s; 429s %d", billed, stats.Admitted.OutputTokens, charged,
		stats.ByStatus["429"])
	require.InDelta(t, billed.Dollars(), charged.Dollars(), 0.05*billed.Dollars(), "within 5 %% of the provider's bill")
	require.Zero(t, stats.ByStatus["429"], "the output quota was settled with what the provider counted")

	// The budget is spent by hang-ups too: past it, refused (429 while
	// streams being read on still hold their worst case, 402 once the
	// total is spent).
	for range 20 {
		code, _ := hangUp(t, url, "ck-chat", 760)
		if code == http.StatusTooManyRequests {
			require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 30*time.Second, 10*time.Millisecond)
			continue
		}
		if code != http.StatusOK {
			require.Equal(t, http.StatusPaymentRequired, code, "refused by its total budget")
			break
		}
	}
	require.Eventually(t, func() bool { return m.Stats().Overall.InFlight == 0 }, 30*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, g.admit.Account("chat", g.clock.Now()).Total.Spent.Dollars(), budget+0.1,
		fmt.Sprintf("over-spent by at most one request's worst case (%s)", g.admit.Account("chat", g.clock.Now()).Total.Spent))
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
