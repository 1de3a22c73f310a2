package admit

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
)

// countingStore counts AddSpend calls and fails them while fail is set.
type countingStore struct {
	jobstore.Store
	mu    sync.Mutex
	adds  int
	fail  bool
	added chan struct{}
}

func (c *countingStore) AddSpend(ctx context.Context, p jobstore.AddSpendParams) error {
	c.mu.Lock()
	c.adds++
	fail := c.fail
	c.mu.Unlock()
	defer func() { c.added <- struct{}{} }()
	if fail {
		return errors.New("store away")
	}
	return c.Store.AddSpend(ctx, p)
}

// TestSpendWritesAreBatched: the spend not kept as holds (reserved and
// settled without persist: a client without a budget, or a request
// admitted while the journal is degraded) is batched: a hundred settled
// requests are one store write at the next flush, not a hundred; a
// failed flush keeps its spend for the next; Stop (close) writes what is
// pending.
func TestSpendWritesAreBatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := jobstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "s.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	cs := &countingStore{Store: st, added: make(chan struct{}, 16)}
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sp, err := newTestSpender(fc, Budget{Day: 100})
	require.NoError(t, err)
	require.NoError(t, sp.start(ctx, cs))
	settle := func(n int) {
		for range n {
			h, err := sp.reserve("team", "claude", llm.Anthropic, &dispatch.Request{Cost: provider.Cost{Model: "claude-x", InputTokens: 100, OutputTokens: 100}})
			require.NoError(t, err)
			h.settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 10}, HasUsage: true}, true)
		}
	}
	settle(100)
	require.Zero(t, cs.adds, "nothing written per request")
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(SpendFlushEvery)
	<-cs.added
	cs.mu.Lock()
	require.Equal(t, 1, cs.adds)
	cs.fail = true
	cs.mu.Unlock()

	settle(50)
	require.True(t, fc.WaitForTimers(1, 5*time.Second))
	fc.Advance(SpendFlushEvery)
	<-cs.added // failed: kept
	cs.mu.Lock()
	cs.fail = false
	cs.mu.Unlock()
	settle(50)
	require.NoError(t, sp.close(ctx)) // the final flush writes both batches
	<-cs.added
	rows, err := st.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, int64(200), rows[0].Requests)
	// 200 x (100 x $10 + 10 x $100) per million = 200 x $0.002.
	require.Equal(t, int64(200*2_000_000), rows[0].Nanos)
	require.Equal(t, 3, cs.adds)
}

// TestSharedStoreSpendIsSeenByEveryGateway: two gateways on one store
// (as on PostgreSQL) each see, after their next flush, what the other
// spent, and refuse what would overrun the budget they share.
func TestSharedStoreSpendIsSeenByEveryGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "s.db")
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	node := func() *spender {
		st, err := jobstore.Open(ctx, dsn, jobstore.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		// $0.01 a day: five requests of $0.002 each.
		sp, err := newTestSpender(fc, Budget{Day: 0.01})
		require.NoError(t, err)
		sp.shared = true
		require.NoError(t, sp.start(ctx, st))
		t.Cleanup(func() { require.NoError(t, sp.close(ctx)) })
		return sp
	}
	a, b := node(), node()
	req := &dispatch.Request{Cost: provider.Cost{Model: "claude-x", InputTokens: 100, OutputTokens: 10}}
	end := dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 10}, HasUsage: true}
	for range 4 {
		h, err := a.reserve("team", "claude", llm.Anthropic, req)
		require.NoError(t, err)
		h.settle(end, true)
	}
	require.NoError(t, a.flush(ctx))
	require.NoError(t, b.flush(ctx)) // nothing of its own: reads the others'
	require.Equal(t, pricing.FromDollars(0.008), b.ledger.Account("team", fc.Now()).Day.Spent)
	h, err := b.reserve("team", "claude", llm.Anthropic, req)
	require.NoError(t, err, "one more fits")
	h.settle(end, true)
	_, err = b.reserve("team", "claude", llm.Anthropic, req)
	require.Error(t, err, "the shared budget is spent")
	require.NoError(t, b.flush(ctx))
	require.NoError(t, a.flush(ctx))
	require.Equal(t, pricing.FromDollars(0.010), a.ledger.Account("team", fc.Now()).Day.Spent)
	_, err = a.reserve("team", "claude", llm.Anthropic, req)
	require.Error(t, err)
}

// TestSetBudgetsKeepsSpend: a reload's new budgets apply at once to the
// spend already made; a client dropped from the config loses its limits.
func TestSetBudgetsKeepsSpend(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	sp, err := newTestSpender(fc, Budget{Day: 1})
	require.NoError(t, err)
	req := &dispatch.Request{Cost: provider.Cost{Model: "claude-x", InputTokens: 1000, OutputTokens: 1000}} // $0.11 worst
	h, err := sp.reserve("team", "claude", llm.Anthropic, req)
	require.NoError(t, err)
	h.settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}}, true) // no usage: the worst case
	sp.setBudgets([]Client{{Name: "team", Budget: Budget{Day: 0.15}}})
	_, err = sp.reserve("team", "claude", llm.Anthropic, req)
	require.Error(t, err, "0.11 spent + 0.11 > 0.15")
	sp.setBudgets(nil)
	require.False(t, sp.hasBudget("team"))
	_, err = sp.reserve("team", "claude", llm.Anthropic, req)
	require.NoError(t, err)
	require.Equal(t, pricing.FromDollars(0.11), sp.ledger.Account("team", fc.Now()).Day.Spent)
}

// spendPrices price the test models: $10 and $100 per million tokens.
var spendPrices = pricing.Config{Models: map[string]pricing.Price{"claude-x": {Input: 10, Output: 100}}}

// newTestSpender is a spender at spendPrices with one client, "team",
// and its budget.
func newTestSpender(fc *clock.Fake, b Budget) (*spender, error) {
	sp, err := newSpender(spendPrices, false, 0, fc, slog.New(slog.DiscardHandler), NopObserver{})
	if err != nil {
		return nil, err
	}
	sp.setBudgets([]Client{{Name: "team", Budget: b}})
	return sp, nil
}
