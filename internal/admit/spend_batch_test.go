package admit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestReserveBatchLine: a provider batch's line is admitted by the budget
// rule of every door, at the batch price: its worst case is half a
// synchronous call's (prices.tiers.batch), held until the line is charged
// or given back; a line that does not fit is refused as a synchronous
// call would be (pending while lines are in flight, the day's reset once
// spent, for good when it can never fit); a line taken over is held
// whatever the budget says; access and service tiers refuse as AdmitNow.
func TestReserveBatchLine(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l, err := New(Config{Clock: fc})
	require.NoError(t, err)
	t0 := Target{Upstream: "claude", Protocol: llm.Anthropic}
	req := func(client, model string) *dispatch.Request {
		return &dispatch.Request{Client: client, Cost: provider.Cost{Model: model, InputTokens: 1000, OutputTokens: 1000}}
	}
	// claude-sonnet-4-5: input at the dearer cache-write price ($3.75),
	// output at $15, per million tokens; the batch price is half.
	worst := pricing.FromDollars((1000*3.75 + 1000*15) / 1e6)
	batchWorst := worst / 2
	l.SetClients([]Client{{Name: "acme", Budget: Budget{Day: batchWorst.Dollars() * 2.5}},
		{Name: "tiny", Budget: Budget{Day: batchWorst.Dollars() / 2}},
		{Name: "narrow", Access: Access{Models: []string{"claude-haiku-*"}}}})
	now := fc.Now()

	a, err := l.ReserveBatchLine(t0, req("acme", "claude-sonnet-4-5"))
	require.NoError(t, err)
	require.Equal(t, batchWorst, a.Amount(), "the line's worst case at the batch price")
	b, err := l.ReserveBatchLine(t0, req("acme", "claude-sonnet-4-5"))
	require.NoError(t, err)
	require.Equal(t, batchWorst*2, l.Account("acme", now).Day.Reserved)

	_, err = l.ReserveBatchLine(t0, req("acme", "claude-sonnet-4-5"))
	var rf *RefusalError
	require.ErrorAs(t, err, &rf, "a third line does not fit while two are in flight")
	require.Equal(t, RefusedBudget, rf.Reason)
	require.Equal(t, http.StatusTooManyRequests, rf.Problem.Status)
	require.Equal(t, now.Add(BudgetPendingRetryAfter), rf.RetryAt, "pending: it may fit once they settle")

	// The first line is billed a fifth of its worst case, the second not
	// at all: a third fits now.
	l.BatchCharged("acme", "claude", BatchLineCost{Entry: "claude-sonnet-4-5", Batch: batchWorst / 5, Standard: batchWorst * 2 / 5}, a)
	l.ReleaseBatchLine(b)
	acct := l.Account("acme", now)
	require.Equal(t, batchWorst/5, acct.Day.Spent)
	require.Zero(t, acct.Day.Reserved)
	c, err := l.ReserveBatchLine(t0, req("acme", "claude-sonnet-4-5"))
	require.NoError(t, err)

	// A line taken over from another router is held whatever the budget:
	// it is sent already. It then holds the next line back.
	h := l.HoldBatchLine(llm.Anthropic, req("acme", "claude-sonnet-4-5"))
	require.Equal(t, batchWorst, h.Amount())
	require.Equal(t, batchWorst*2, l.Account("acme", now).Day.Reserved)
	l.ReleaseBatchLine(c)
	l.ReleaseBatchLine(h)

	_, err = l.ReserveBatchLine(t0, req("tiny", "claude-sonnet-4-5"))
	require.ErrorAs(t, err, &rf)
	require.Equal(t, http.StatusBadRequest, rf.Problem.Status, "a line its budget can never hold")
	require.True(t, rf.RetryAt.IsZero())

	_, err = l.ReserveBatchLine(t0, req("narrow", "claude-sonnet-4-5"))
	require.ErrorAs(t, err, &rf)
	require.Equal(t, RefusedAccess, rf.Reason)
	require.True(t, rf.RetryAt.IsZero())

	// A client without a budget is always admitted (and counted).
	free, err := l.ReserveBatchLine(t0, req("other", "claude-sonnet-4-5"))
	require.NoError(t, err)
	require.Equal(t, batchWorst, l.Account("other", now).Day.Reserved)
	l.ReleaseBatchLine(free)
	require.Zero(t, l.Account("other", now).Day.Reserved)
}
