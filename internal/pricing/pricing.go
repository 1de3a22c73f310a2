package pricing

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Amount is an amount of US dollars in nano-dollars (1e-9 USD). The zero
// value is nothing; it holds up to about 9.2 billion dollars.
type Amount int64

// NanosPerDollar is the number of Amount units in one US dollar.
const NanosPerDollar = 1_000_000_000

// Dollars returns a as a float in US dollars.
func (a Amount) Dollars() float64 { return float64(a) / NanosPerDollar }

// FromDollars converts US dollars to an Amount, rounded to the nearest
// nano-dollar; negative, NaN and infinite inputs give 0 or the maximum.
func FromDollars(usd float64) Amount {
	switch {
	case math.IsNaN(usd) || usd <= 0:
		return 0
	case usd >= math.MaxInt64/NanosPerDollar:
		return math.MaxInt64
	}
	return Amount(math.Round(usd * NanosPerDollar))
}

// String formats a as dollars with up to 6 decimals ("$1.234567").
func (a Amount) String() string { return fmt.Sprintf("$%.6f", a.Dollars()) }

// Price is one model's price, in US dollars per million tokens.
type Price struct {
	// Input is the price of uncached input (prompt) tokens. Required.
	Input float64 `yaml:"input" json:"input"`
	// Output is the price of output (completion, reasoning) tokens.
	// Required.
	Output float64 `yaml:"output" json:"output"`
	// CacheRead is the price of input tokens read from the prompt cache.
	// Defaults to Input (no discount assumed).
	CacheRead float64 `yaml:"cache_read" json:"cache_read"`
	// CacheWrite is the price of input tokens written to the prompt cache
	// (Anthropic's cache creation; with the default 5-minute TTL).
	// Defaults to Input.
	CacheWrite float64 `yaml:"cache_write" json:"cache_write"`
	// CacheWrite1h is the price of input tokens written to the prompt
	// cache with Anthropic's 1-hour TTL (cache_control ttl "1h"), reported
	// apart in the usage's cache_creation.ephemeral_1h_input_tokens.
	// Defaults to CacheWrite.
	CacheWrite1h float64 `yaml:"cache_write_1h" json:"cache_write_1h,omitempty"`
	// LongContextAbove, when positive, is the prompt size (input tokens,
	// cached ones included) above which the whole request is priced at
	// LongContext instead (Anthropic's 1M-context Sonnet surcharge).
	// Defaults to 0 (one price whatever the size).
	LongContextAbove int64 `yaml:"long_context_above" json:"long_context_above,omitempty"`
	// LongContext is the price above LongContextAbove; its zero cache
	// prices default to its input price. Required with LongContextAbove.
	LongContext *Price `yaml:"long_context" json:"long_context,omitempty"`
}

// at returns the price of a request whose prompt holds prompt tokens.
func (p Price) at(prompt int64) Price {
	if p.LongContextAbove > 0 && p.LongContext != nil && prompt > p.LongContextAbove {
		return p.LongContext.WithDefaults()
	}
	return p.WithDefaults()
}

// Scaled returns p (defaults filled in) with every price, its long-context
// price's included, multiplied by f: its price in a service tier
// (Table.TierFactor). f == 1 returns p unchanged.
func (p Price) Scaled(f float64) Price {
	if f == 1 {
		return p
	}
	p = p.WithDefaults()
	p.Input, p.Output, p.CacheRead, p.CacheWrite, p.CacheWrite1h = p.Input*f, p.Output*f, p.CacheRead*f, p.CacheWrite*f, p.CacheWrite1h*f
	if p.LongContext != nil {
		lc := p.LongContext.WithDefaults().Scaled(f)
		p.LongContext = &lc
	}
	return p
}

// WithDefaults returns p with a zero CacheRead or CacheWrite set to Input.
func (p Price) WithDefaults() Price {
	if p.CacheRead == 0 {
		p.CacheRead = p.Input
	}
	if p.CacheWrite == 0 {
		p.CacheWrite = p.Input
	}
	if p.CacheWrite1h == 0 {
		p.CacheWrite1h = p.CacheWrite
	}
	return p
}

// Validate reports a negative, NaN, infinite or absurd field (over
// MaxPrice), naming it.
func (p Price) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input", p.Input}, {"output", p.Output}, {"cache_read", p.CacheRead}, {"cache_write", p.CacheWrite}, {"cache_write_1h", p.CacheWrite1h}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > MaxPrice {
			return fmt.Errorf("%s: %v is not a price in USD per million tokens between 0 and %d", f.name, f.v, MaxPrice)
		}
	}
	switch {
	case p.LongContextAbove < 0:
		return fmt.Errorf("long_context_above: %d must be >= 0", p.LongContextAbove)
	case p.LongContextAbove > 0 && p.LongContext == nil:
		return errors.New("long_context: required with long_context_above")
	case p.LongContext != nil:
		if p.LongContext.LongContext != nil || p.LongContext.LongContextAbove != 0 {
			return errors.New("long_context: cannot nest another long_context")
		}
		if err := p.LongContext.Validate(); err != nil {
			return fmt.Errorf("long_context.%w", err)
		}
	}
	return nil
}

// MaxPrice bounds a configured price (USD per million tokens): above it a
// typo (a price per token given per million) is more likely than a model.
const MaxPrice = 100_000

// perToken converts a price per million tokens to nano-dollars per token
// (1 USD/MTok = 1e-6 USD/token = 1000 nano-dollars/token).
func perToken(usdPerMTok float64) float64 { return usdPerMTok * 1000 }

// Cost is what usage costs at p (its long-context price when the prompt is
// above the threshold) for an upstream speaking protocol proto.
// Anthropic reports uncached input, cache writes and cache reads apart;
// OpenAI's input tokens include the cached ones, which are charged at
// CacheRead instead of Input. Rounded up to the next nano-dollar.
func (p Price) Cost(proto llm.Protocol, u llm.Usage) Amount {
	in, cached, written := nonNeg(u.InputTokens), nonNeg(u.CacheReadInputTokens), nonNeg(u.CacheCreationInputTokens)
	if proto == llm.OpenAI {
		cached = min(cached, in)
		in -= cached
	}
	p = p.at(in + cached + written)
	// 1-hour writes at their own price when the usage splits them out;
	// the rest of the writes at the 5-minute price.
	written1h := min(nonNeg(u.CacheCreation1hInputTokens), written)
	n := float64(in)*perToken(p.Input) + float64(cached)*perToken(p.CacheRead) +
		float64(written-written1h)*perToken(p.CacheWrite) + float64(written1h)*perToken(p.CacheWrite1h) +
		float64(nonNeg(u.OutputTokens))*perToken(p.Output)
	return ceilAmount(n)
}

// Worst is the most a request estimated as c, whose cacheable prefix is
// prefix (the zero value for none), can cost at p: every input token at
// the dearer of Input and CacheWrite (a prompt may be written to the
// cache), those up to its last 1-hour breakpoint at the dearer of those
// and CacheWrite1h (Anthropic writes them at the 1-hour price), and the
// whole output reservation (max_tokens, or the protocol's default, times
// n) at Output; at the long-context price when the estimate is above its
// threshold.
func (p Price) Worst(c provider.Cost, prefix provider.CachePrefix) Amount {
	in := nonNeg(c.InputTokens)
	p = p.at(in)
	var written1h int64
	for _, b := range prefix.Blocks {
		if b.TTL == provider.CacheTTL1h {
			written1h = min(nonNeg(b.Tokens), in)
		}
	}
	n := float64(in-written1h)*perToken(max(p.Input, p.CacheWrite)) +
		float64(written1h)*perToken(max(p.Input, p.CacheWrite, p.CacheWrite1h)) +
		float64(nonNeg(c.OutputTokens))*perToken(p.Output)
	return ceilAmount(n)
}

func nonNeg(v int64) int64 { return max(v, 0) }

func ceilAmount(n float64) Amount {
	if math.IsNaN(n) || n <= 0 {
		return 0
	}
	if n >= math.MaxInt64 {
		return math.MaxInt64
	}
	return Amount(math.Ceil(n))
}

// ErrUnknownModel means the model has no price and the table refuses
// unknown models (Config.Unknown: refuse).
var ErrUnknownModel = errors.New("no price for this model")

// Table finds models' prices. Build it with NewTable; it is immutable and
// safe for concurrent use.
type Table struct {
	exact    map[string]Price
	prefixes []string // longest first
	fallback Price
	refuse   bool
	tiers    map[string]float64 // service tier factors (Config.Tiers)
}

// TierFactor is the factor every price of a request served in service
// tier tier is multiplied by: Config.Tiers, else 1 (an empty tier, auto,
// default, standard, scale). Names are compared case-insensitively.
func (t *Table) TierFactor(tier string) float64 {
	if f, ok := t.tiers[strings.ToLower(strings.TrimSpace(tier))]; ok {
		return f
	}
	return 1
}

// Tiers returns a copy of the table's tier factors.
func (t *Table) Tiers() map[string]float64 {
	out := make(map[string]float64, len(t.tiers))
	for k, v := range t.tiers {
		out[k] = v
	}
	return out
}

// Match is a model's price as found in the table.
type Match struct {
	// Price is the price to charge.
	Price Price
	// Entry is the table entry that matched (a bounded set of names, used
	// as the model label of metrics and status), or UnknownEntry.
	Entry string
	// Known is false when the fallback price was used.
	Known bool
}

// UnknownEntry is Match.Entry of a model the table has no price for.
const UnknownEntry = "unknown"

// newTable builds a table from entries (keys lower-cased).
func newTable(entries map[string]Price, fallback Price, refuse bool) *Table {
	t := &Table{exact: make(map[string]Price, len(entries)), fallback: fallback.WithDefaults(), refuse: refuse}
	for name, p := range entries {
		name = strings.ToLower(strings.TrimSpace(name))
		t.exact[name] = p.WithDefaults()
		t.prefixes = append(t.prefixes, name)
	}
	sort.Slice(t.prefixes, func(i, j int) bool {
		if len(t.prefixes[i]) != len(t.prefixes[j]) {
			return len(t.prefixes[i]) > len(t.prefixes[j])
		}
		return t.prefixes[i] < t.prefixes[j]
	})
	return t
}

// Lookup returns model's price: the exact entry, else the longest entry
// that is a prefix of model ending at a separator, else the fallback price
// with Known false (and, when the table refuses unknown models,
// ErrUnknownModel: the caller decides whether to refuse or to count the
// spend at the fallback). Names are compared case-insensitively.
func (t *Table) Lookup(model string) (Match, error) {
	m := strings.ToLower(strings.TrimSpace(model))
	if p, ok := t.exact[m]; ok {
		return Match{Price: p, Entry: m, Known: true}, nil
	}
	for _, pre := range t.prefixes {
		if len(pre) < len(m) && strings.HasPrefix(m, pre) && isSeparator(m[len(pre)]) {
			return Match{Price: t.exact[pre], Entry: pre, Known: true}, nil
		}
	}
	fb := Match{Price: t.fallback, Entry: UnknownEntry}
	if t.refuse {
		return fb, fmt.Errorf("%w: %q (add it under prices.models in the config)", ErrUnknownModel, model)
	}
	return fb, nil
}

// Len returns the number of entries.
func (t *Table) Len() int { return len(t.exact) }

// Entries returns a copy of the table's entries.
func (t *Table) Entries() map[string]Price {
	out := make(map[string]Price, len(t.exact))
	for k, v := range t.exact {
		out[k] = v
	}
	return out
}

func isSeparator(b byte) bool {
	switch b {
	case '-', '_', ':', '@', '/':
		return true
	}
	return false
}
