package pricing

// PricesAsOf is the date the shipped prices were last checked against the
// providers' published list prices. Prices change: override them under
// prices.models in the config.
const PricesAsOf = "2025-11-24"

// Shipped returns the default price table's entries: list prices in USD
// per million tokens, standard tier (OpenAI's priority and flex tiers are
// not modelled; Claude Sonnet 4.x's price above 200K prompt tokens is),
// Anthropic cache writes at the 5-minute TTL rate (1.25x input) and the
// 1-hour rate (2x input, CacheWrite1h). OpenAI does not charge cache writes, so its CacheWrite is Input.
// Dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4o-2024-08-06") find
// their family by prefix; a snapshot priced differently has its own entry.
func Shipped() map[string]Price {
	out := make(map[string]Price, len(shipped))
	for k, v := range shipped {
		if v.LongContext != nil {
			lc := *v.LongContext
			v.LongContext = &lc
		}
		out[k] = v
	}
	return out
}

// sonnetLong is Claude Sonnet 4.x's price for prompts above 200K tokens
// (the 1M-token context window).
var sonnetLong = &Price{Input: 6, Output: 22.50, CacheRead: 0.60, CacheWrite: 7.50, CacheWrite1h: 12}

var shipped = map[string]Price{
	// Anthropic, Claude 4.x.
	"claude-opus-4-5":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25, CacheWrite1h: 10},
	"claude-opus-4-1":   {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75, CacheWrite1h: 30},
	"claude-opus-4":     {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75, CacheWrite1h: 30},
	"claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, CacheWrite1h: 6, LongContextAbove: 200_000, LongContext: sonnetLong},
	"claude-sonnet-4":   {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, CacheWrite1h: 6, LongContextAbove: 200_000, LongContext: sonnetLong},
	"claude-haiku-4-5":  {Input: 1, Output: 5, CacheRead: 0.10, CacheWrite: 1.25, CacheWrite1h: 2},
	// Anthropic, Claude 3.x still served.
	"claude-3-7-sonnet": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, CacheWrite1h: 6},
	"claude-3-5-sonnet": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, CacheWrite1h: 6},
	"claude-3-5-haiku":  {Input: 0.80, Output: 4, CacheRead: 0.08, CacheWrite: 1, CacheWrite1h: 1.6},
	"claude-3-opus":     {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75, CacheWrite1h: 30},
	"claude-3-haiku":    {Input: 0.25, Output: 1.25, CacheRead: 0.03, CacheWrite: 0.30, CacheWrite1h: 0.5},

	// OpenAI, GPT-5 family.
	"gpt-5":       {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25},
	"gpt-5-mini":  {Input: 0.25, Output: 2, CacheRead: 0.025, CacheWrite: 0.25},
	"gpt-5-nano":  {Input: 0.05, Output: 0.40, CacheRead: 0.005, CacheWrite: 0.05},
	"gpt-5-pro":   {Input: 15, Output: 120, CacheRead: 15, CacheWrite: 15},
	"gpt-5.1":     {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25},
	"gpt-5-codex": {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25},
	// OpenAI, GPT-4.1 family.
	"gpt-4.1":      {Input: 2, Output: 8, CacheRead: 0.50, CacheWrite: 2},
	"gpt-4.1-mini": {Input: 0.40, Output: 1.60, CacheRead: 0.10, CacheWrite: 0.40},
	"gpt-4.1-nano": {Input: 0.10, Output: 0.40, CacheRead: 0.025, CacheWrite: 0.10},
	// OpenAI, GPT-4o family (the first snapshot was dearer).
	"gpt-4o":            {Input: 2.50, Output: 10, CacheRead: 1.25, CacheWrite: 2.50},
	"gpt-4o-2024-05-13": {Input: 5, Output: 15, CacheRead: 5, CacheWrite: 5},
	"gpt-4o-mini":       {Input: 0.15, Output: 0.60, CacheRead: 0.075, CacheWrite: 0.15},
	// OpenAI, o-series reasoning models (reasoning tokens are output).
	"o1":      {Input: 15, Output: 60, CacheRead: 7.50, CacheWrite: 15},
	"o1-mini": {Input: 1.10, Output: 4.40, CacheRead: 0.55, CacheWrite: 1.10},
	"o1-pro":  {Input: 150, Output: 600, CacheRead: 150, CacheWrite: 150},
	"o3":      {Input: 2, Output: 8, CacheRead: 0.50, CacheWrite: 2},
	"o3-mini": {Input: 1.10, Output: 4.40, CacheRead: 0.55, CacheWrite: 1.10},
	"o3-pro":  {Input: 20, Output: 80, CacheRead: 20, CacheWrite: 20},
	"o4-mini": {Input: 1.10, Output: 4.40, CacheRead: 0.275, CacheWrite: 1.10},
	// OpenAI, older models still served.
	"gpt-4-turbo":   {Input: 10, Output: 30, CacheRead: 10, CacheWrite: 10},
	"gpt-4":         {Input: 30, Output: 60, CacheRead: 30, CacheWrite: 30},
	"gpt-3.5-turbo": {Input: 0.50, Output: 1.50, CacheRead: 0.50, CacheWrite: 0.50},
}
