package pricing_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	tab, err := pricing.NewTable(pricing.Config{Models: map[string]pricing.Price{"My-Model": {Input: 1, Output: 2}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		model, entry string
		known        bool
	}{
		{"claude-sonnet-4-5", "claude-sonnet-4-5", true},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5", true},
		{"claude-sonnet-4-20250514", "claude-sonnet-4", true},
		{"claude-opus-4-1-20250805", "claude-opus-4-1", true},
		{"claude-opus-4-5-20251101", "claude-opus-4-5", true},
		{"claude-3-5-haiku-latest", "claude-3-5-haiku", true},
		{"gpt-4o-2024-11-20", "gpt-4o", true},
		{"gpt-4o-2024-05-13", "gpt-4o-2024-05-13", true},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini", true},
		{"GPT-4.1-MINI", "gpt-4.1-mini", true},
		{"gpt-5.1-2025-11-13", "gpt-5.1", true},
		{"o3-mini-2025-01-31", "o3-mini", true},
		{"my-model", "my-model", true},
		{"my-model-v2", "my-model", true},
		{"gpt-4oz", pricing.UnknownEntry, false}, // no separator after "gpt-4o"
		{"o5", pricing.UnknownEntry, false},
		{"", pricing.UnknownEntry, false},
	} {
		m, err := tab.Lookup(tc.model)
		require.NoError(t, err, tc.model)
		require.Equal(t, tc.entry, m.Entry, tc.model)
		require.Equal(t, tc.known, m.Known, tc.model)
	}
}

func TestUnknownModels(t *testing.T) {
	t.Parallel()
	tab, err := pricing.NewTable(pricing.Config{})
	require.NoError(t, err)
	m, err := tab.Lookup("brand-new-model")
	require.NoError(t, err)
	// The fallback is the dearest price shipped: an unknown model never
	// costs a budget less than any known one.
	for name, p := range pricing.Shipped() {
		require.GreaterOrEqual(t, m.Price.Input, p.Input, name)
		require.GreaterOrEqual(t, m.Price.Output, p.Output, name)
	}

	refuse, err := pricing.NewTable(pricing.Config{Unknown: pricing.UnknownRefuse})
	require.NoError(t, err)
	_, err = refuse.Lookup("brand-new-model")
	require.ErrorIs(t, err, pricing.ErrUnknownModel)
	require.ErrorContains(t, err, "brand-new-model")

	fb := pricing.Price{Input: 1, Output: 1}
	custom, err := pricing.NewTable(pricing.Config{Fallback: &fb, NoShipped: true})
	require.NoError(t, err)
	require.Zero(t, custom.Len())
	m, err = custom.Lookup("claude-sonnet-4-5")
	require.NoError(t, err)
	require.False(t, m.Known)
	require.InDelta(t, 1.0, m.Price.Output, 0)
}

func TestCost(t *testing.T) {
	t.Parallel()
	p := pricing.Price{Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75}
	u := llm.Usage{InputTokens: 1000, OutputTokens: 1000, CacheReadInputTokens: 1000, CacheCreationInputTokens: 1000}
	// Anthropic: each count priced apart: (3 + 15 + 0.3 + 3.75) / 1000 dollars.
	require.Equal(t, pricing.FromDollars(0.02205), p.Cost(llm.Anthropic, u))
	// OpenAI: the cached tokens are inside the input tokens.
	o := pricing.Price{Input: 2.5, Output: 10, CacheRead: 1.25}
	u = llm.Usage{InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 400}
	require.Equal(t, pricing.FromDollars((600*2.5+400*1.25+100*10)/1e6), o.Cost(llm.OpenAI, u))
	// Worst case: input at the dearer of input and cache write, all of max_tokens.
	require.Equal(t, pricing.FromDollars((1000*3.75+4096*15)/1e6), p.Worst(provider.Cost{InputTokens: 1000, OutputTokens: 4096}, provider.CachePrefix{}))
	// Rounding is up, never down.
	require.Equal(t, pricing.Amount(1), pricing.Price{Input: 0.0001}.Cost(llm.Anthropic, llm.Usage{InputTokens: 1}))
	require.Zero(t, p.Cost(llm.Anthropic, llm.Usage{InputTokens: -5}))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	for _, tc := range []struct {
		cfg  pricing.Config
		want string
	}{
		{pricing.Config{Unknown: "maybe"}, "unknown:"},
		{pricing.Config{Models: map[string]pricing.Price{"m": {Input: -1}}}, "models.m.input"},
		{pricing.Config{Models: map[string]pricing.Price{"m": {Output: nan}}}, "models.m.output"},
		{pricing.Config{Models: map[string]pricing.Price{"m": {CacheRead: 1e9}}}, "models.m.cache_read"},
		{pricing.Config{Models: map[string]pricing.Price{" ": {}}}, "models: a model name is empty"},
		{pricing.Config{Models: map[string]pricing.Price{"M": {}, "m": {}}}, "case-insensitive"},
		{pricing.Config{Fallback: &pricing.Price{CacheWrite: -2}}, "fallback.cache_write"},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
	require.NoError(t, pricing.Config{Models: map[string]pricing.Price{"m": {Input: 1, Output: 2}}}.Validate())
}

func TestShippedPricesAreValid(t *testing.T) {
	t.Parallel()
	for name, p := range pricing.Shipped() {
		require.NoError(t, p.Validate(), name)
		require.Positive(t, p.Input, name)
		require.Positive(t, p.Output, name)
		require.GreaterOrEqual(t, p.Output, p.Input, name)
	}
}

func TestLongContextPrice(t *testing.T) {
	t.Parallel()
	tab, err := pricing.NewTable(pricing.Config{})
	require.NoError(t, err)
	m, err := tab.Lookup("claude-sonnet-4-5-20250929")
	require.NoError(t, err)
	short := llm.Usage{InputTokens: 100_000, CacheReadInputTokens: 100_000, OutputTokens: 1000}
	require.Equal(t, pricing.FromDollars(0.3+0.03+0.015), m.Price.Cost(llm.Anthropic, short))
	long := llm.Usage{InputTokens: 100_000, CacheReadInputTokens: 100_001, OutputTokens: 1000}
	require.Equal(t, pricing.FromDollars(0.6+100_001*0.6/1e6+0.0225), m.Price.Cost(llm.Anthropic, long))
	require.Equal(t, pricing.FromDollars(250_000*7.5/1e6+1000*22.5/1e6), m.Price.Worst(provider.Cost{InputTokens: 250_000, OutputTokens: 1000}, provider.CachePrefix{}))

	bad := pricing.Price{Input: 1, Output: 1, LongContextAbove: 10}
	require.ErrorContains(t, bad.Validate(), "long_context: required")
	bad.LongContext = &pricing.Price{Input: -1}
	require.ErrorContains(t, bad.Validate(), "long_context.input")
}

func TestTierFactors(t *testing.T) {
	t.Parallel()
	tab, err := pricing.NewTable(pricing.Config{Tiers: map[string]float64{"priority": 1.75, "Scale": 1.1}})
	require.NoError(t, err)
	for tier, want := range map[string]float64{"": 1, "auto": 1, "default": 1, "flex": 0.5, "batch": 0.5, "priority": 1.75, "scale": 1.1, "FLEX": 0.5} {
		require.InDelta(t, want, tab.TierFactor(tier), 1e-12, tier)
	}
	p := pricing.Price{Input: 2, Output: 8, LongContextAbove: 10, LongContext: &pricing.Price{Input: 4, Output: 16}}
	half := p.Scaled(0.5)
	require.Equal(t, 1.0, half.Input)
	require.Equal(t, 4.0, half.Output)
	require.Equal(t, 1.0, half.CacheRead, "the cache prices default before scaling")
	require.Equal(t, 2.0, half.LongContext.Input)
	require.Equal(t, 4.0, p.LongContext.Input, "the original is not changed")
	u := llm.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}
	require.Equal(t, p.Cost(llm.OpenAI, u)/2, half.Cost(llm.OpenAI, u))

	for _, bad := range []map[string]float64{{"flex": 0}, {"flex": -1}, {"flex": 1000}, {" ": 1}} {
		_, err := pricing.NewTable(pricing.Config{Tiers: bad})
		require.ErrorContains(t, err, "tiers", "%v", bad)
	}
}

// TestCacheWritePrices: 5-minute and 1-hour cache writes are priced apart
// when the usage splits them; an unsplit write is a 5-minute one.
func TestCacheWritePrices(t *testing.T) {
	t.Parallel()
	p := pricing.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 6}
	for _, tc := range []struct {
		name string
		u    llm.Usage
		want float64
	}{
		{"5m only", llm.Usage{InputTokens: 10, CacheCreationInputTokens: 1000}, 10*3 + 1000*3.75},
		{"split", llm.Usage{InputTokens: 10, CacheCreationInputTokens: 1000, CacheCreation5mInputTokens: 400, CacheCreation1hInputTokens: 600}, 10*3 + 400*3.75 + 600*6},
		{"read and 1h", llm.Usage{CacheReadInputTokens: 2000, CacheCreationInputTokens: 100, CacheCreation1hInputTokens: 100}, 2000*0.3 + 100*6},
		{"1h beyond the total is capped", llm.Usage{CacheCreationInputTokens: 100, CacheCreation1hInputTokens: 500}, 100 * 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, pricing.FromDollars(tc.want/1e6), p.Cost(llm.Anthropic, tc.u))
		})
	}
	require.Equal(t, 3.75, pricing.Price{Input: 3, CacheWrite: 3.75}.WithDefaults().CacheWrite1h, "defaults to the 5-minute price")
	require.ErrorContains(t, pricing.Price{Input: 1, Output: 1, CacheWrite1h: -1}.Validate(), "cache_write_1h")
}

// TestWorstPricesOneHourWrites: the worst case holds the prompt up to its
// last 1-hour breakpoint at cache_write_1h (when that is the dearest
// input rate), the rest at the dearer of input and cache_write; a prefix
// without a 1-hour breakpoint changes nothing, and the 1-hour part is
// bounded by the input estimate.
func TestWorstPricesOneHourWrites(t *testing.T) {
	t.Parallel()
	p := pricing.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 6}
	c := provider.Cost{InputTokens: 1000, OutputTokens: 100}
	block := func(tokens int64, ttl time.Duration) provider.PrefixBlock {
		return provider.PrefixBlock{Tokens: tokens, TTL: ttl}
	}
	tests := []struct {
		name   string
		p      pricing.Price
		blocks []provider.PrefixBlock
		want   float64 // USD
		w1h    int64   // the most the provider can write at the 1-hour price
	}{
		{"no prefix", p, nil, (1000*3.75 + 100*15) / 1e6, 0},
		{"5-minute breakpoints", p, []provider.PrefixBlock{block(400, provider.CacheTTL5m), block(800, provider.CacheTTL5m)}, (1000*3.75 + 100*15) / 1e6, 0},
		{"1-hour then 5-minute", p, []provider.PrefixBlock{block(300, 0), block(400, provider.CacheTTL1h), block(800, provider.CacheTTL5m)},
			(400*6 + 600*3.75 + 100*15) / 1e6, 400},
		{"two 1-hour breakpoints", p, []provider.PrefixBlock{block(400, provider.CacheTTL1h), block(700, provider.CacheTTL1h)},
			(700*6 + 300*3.75 + 100*15) / 1e6, 700},
		{"prefix above the estimate", p, []provider.PrefixBlock{block(5000, provider.CacheTTL1h)}, (1000*6 + 100*15) / 1e6, 1000},
		{"1-hour cheaper than input", pricing.Price{Input: 10, Output: 15, CacheWrite1h: 6}, []provider.PrefixBlock{block(400, provider.CacheTTL1h)},
			(1000*10 + 100*15) / 1e6, 400},
		{"1-hour defaults to cache_write", pricing.Price{Input: 3, Output: 15, CacheWrite: 3.75}, []provider.PrefixBlock{block(400, provider.CacheTTL1h)},
			(1000*3.75 + 100*15) / 1e6, 400},
	}
	for _, tt := range tests {
		got := tt.p.Worst(c, provider.CachePrefix{Blocks: tt.blocks})
		require.Equal(t, pricing.FromDollars(tt.want), got, tt.name)
		// The worst case covers the dearest charge the usage can report:
		// the whole prompt written, its 1-hour part at the 1-hour price.
		u := llm.Usage{CacheCreationInputTokens: 1000, CacheCreation1hInputTokens: tt.w1h, OutputTokens: 100}
		require.LessOrEqual(t, tt.p.Cost(llm.Anthropic, u), got, tt.name)
		require.LessOrEqual(t, tt.p.Cost(llm.Anthropic, llm.Usage{InputTokens: 1000, OutputTokens: 100}), got, tt.name)
	}
}

// TestScaledScalesEveryPrice: a service tier's factor applies to the
// 1-hour write price too.
func TestScaledScalesEveryPrice(t *testing.T) {
	t.Parallel()
	p := pricing.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 6}.Scaled(2)
	require.Equal(t, pricing.Price{Input: 6, Output: 30, CacheRead: 0.6, CacheWrite: 7.5, CacheWrite1h: 12}, p)
	d := pricing.Price{Input: 3, Output: 15}.Scaled(0.5)
	require.Equal(t, pricing.Price{Input: 1.5, Output: 7.5, CacheRead: 1.5, CacheWrite: 1.5, CacheWrite1h: 1.5}, d)
	u := llm.Usage{CacheCreationInputTokens: 1000, CacheCreation1hInputTokens: 1000}
	require.Equal(t, pricing.FromDollars(1000*12/1e6), p.Cost(llm.Anthropic, u))
}
