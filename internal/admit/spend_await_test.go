package admit

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestBudgetsWaitForTheSpendStore: while the store the spend is kept in
// has not connected (AwaitSpendStore), a client with a budget is refused
// with a retryable 503 naming the store (its spend so far is unknown),
// and a client without one is served, its spend counted in memory; once
// the store is loaded the budgeted client is served, and the spend
// counted before reaches the store.
func TestBudgetsWaitForTheSpendStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := New(Config{Clients: []Client{{Name: "team", Budget: Budget{Day: 100}}, {Name: "free"}}, Prices: spendPrices,
		Clock: fc, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	l.AwaitSpendStore()
	req := func() *dispatch.Request {
		return &dispatch.Request{Cost: provider.Cost{Model: "claude-x", InputTokens: 100, OutputTokens: 100}}
	}
	_, err = l.spend.reserve("team", "claude", llm.Anthropic, req())
	require.ErrorIs(t, err, ErrSpendNotLoaded)
	r := l.refusal(Target{Upstream: "claude", Protocol: llm.Anthropic}, err)
	require.Equal(t, http.StatusServiceUnavailable, r.Problem.Status)
	require.Equal(t, SpendNotLoadedRetryAfter, r.Problem.RetryAfter)
	require.True(t, r.Problem.ShouldRetry)
	require.Contains(t, r.Problem.Message, "store is not connected yet")
	require.Equal(t, fc.Now().Add(SpendNotLoadedRetryAfter), r.RetryAt, "a job would wait, not die")

	h, err := l.spend.reserve("free", "claude", llm.Anthropic, req())
	require.NoError(t, err, "a client without a budget is served")
	h.settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 10}, HasUsage: true}, true)

	st, err := jobstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "s.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	require.NoError(t, l.Start(ctx, st))
	h, err = l.spend.reserve("team", "claude", llm.Anthropic, req())
	require.NoError(t, err, "the spend is loaded: the budget is enforced, not refused")
	h.refund()
	require.NoError(t, l.Stop(ctx))
	rows, err := st.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "free", rows[0].Client, "the spend counted before the store connected reached it")
}
