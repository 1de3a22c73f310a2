package admit

import (
	"log/slog"
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

func TestServiceTiersValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, ServiceTiers{}.Validate())
	require.NoError(t, ServiceTiers{"flex", "default", "auto", "standard_only"}.Validate())
	require.ErrorContains(t, ServiceTiers{"flex", "turbo"}.Validate(), `[1]: "turbo" is not a service tier`)
	require.ErrorContains(t, ServiceTiers{"flex", "flex"}.Validate(), "listed twice")
}

// TestServiceTierAllowList: a client's allow-list refuses, on every door
// (Do and AdmitNow), a request asking for another tier with a 403
// permission_error naming the allowed ones; a request without a tier asks
// for auto; a client without a list may ask for any.
func TestServiceTierAllowList(t *testing.T) {
	t.Parallel()
	l, err := New(Config{Clients: []Client{{Name: "flexonly", ServiceTiers: ServiceTiers{"flex", "auto"}}}})
	require.NoError(t, err)
	tgt := Target{Upstream: "gpt", Protocol: llm.OpenAI}
	tests := []struct {
		client, tier string
		ok           bool
	}{
		{"flexonly", "flex", true},
		{"flexonly", "", true},
		{"flexonly", "priority", false},
		{"flexonly", "default", false},
		{"anyone", "priority", true},
	}
	for _, tt := range tests {
		req := &dispatch.Request{Client: tt.client, Cost: provider.Cost{Model: "gpt-4.1", InputTokens: 10, OutputTokens: 10, ServiceTier: tt.tier}}
		s, err := l.AdmitNow(tgt, req)
		if tt.ok {
			require.NoError(t, err, "%+v", tt)
			s.Settle(dispatch.End{}, false)
			continue
		}
		var rf *RefusalError
		require.ErrorAs(t, err, &rf, "%+v", tt)
		require.Equal(t, http.StatusForbidden, rf.Problem.Status)
		require.Equal(t, "permission_error", rf.Problem.Type)
		require.Contains(t, rf.Problem.Message, "flex, auto")
		require.Contains(t, rf.Problem.Message, tt.tier)
		require.True(t, rf.RetryAt.IsZero(), "never retried: a job dies with it")
	}
}

// TestSpendPricesTheServedTier: the reservation is priced in the tier
// asked for, the settlement in the tier the answer reports (else the one
// asked for): flex and batch at half, priority at twice the standard
// price, a configured factor replacing a shipped one.
func TestSpendPricesTheServedTier(t *testing.T) {
	t.Parallel()
	price := func(in, out int64, f float64) pricing.Amount {
		return pricing.FromDollars(f * (float64(in)*10 + float64(out)*100) / 1e6)
	}
	tests := []struct {
		name        string
		tiers       map[string]float64
		asked, told string
		want        float64
	}{
		{"standard", nil, "", "default", 1},
		{"flex reported", nil, "flex", "flex", 0.5},
		{"auto served as priority", nil, "auto", "priority", 2},
		{"no tier reported: the asked one", nil, "flex", "", 0.5},
		{"anthropic batch", nil, "", "batch", 0.5},
		{"configured factor", map[string]float64{"priority": 1.75}, "priority", "priority", 1.75},
	}
	for _, tt := range tests {
		fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		prices := spendPrices
		prices.Tiers = tt.tiers
		sp, err := newSpender(prices, false, 0, fc, slog.New(slog.DiscardHandler), NopObserver{})
		require.NoError(t, err, tt.name)
		sp.setBudgets([]Client{{Name: "team", Budget: Budget{Day: 100}}})
		cost := provider.Cost{Model: "claude-x", InputTokens: 1000, OutputTokens: 500, ServiceTier: tt.asked}
		h, err := sp.reserve("team", "gpt", llm.OpenAI, &dispatch.Request{Cost: cost})
		require.NoError(t, err, tt.name)
		askedFactor := map[string]float64{"flex": 0.5, "priority": 2}[tt.asked]
		if f, ok := tt.tiers[tt.asked]; ok {
			askedFactor = f
		}
		if askedFactor == 0 {
			askedFactor = 1
		}
		require.InDelta(t, price(1000, 500, askedFactor).Dollars(), h.hold.Amount().Dollars(), 1e-8, tt.name)
		got := h.settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, HasUsage: true,
			Usage: llm.Usage{InputTokens: 400, OutputTokens: 100, ServiceTier: tt.told}}, true)
		require.InDelta(t, price(400, 100, tt.want).Dollars(), got.Dollars(), 1e-8, tt.name)
	}
}
