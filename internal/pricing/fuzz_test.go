package pricing_test

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
)

// FuzzConfig decodes arbitrary YAML as a prices: section, as the gateway's
// config loader does: a config that validates builds a table, and every
// lookup either finds a valid price or falls back, never panics, and never
// prices a request below zero.
func FuzzConfig(f *testing.F) {
	f.Add("models:\n  m: {input: 1, output: 2}\nunknown: refuse\n", "m-2025")
	f.Add("models:\n  claude-x: {input: 1e5, output: 0, cache_read: .5}\nfallback: {input: 3, output: 4}\n", "claude-x@1")
	f.Add("no_shipped: true\n", "gpt-4o")
	f.Add("models:\n  s: {input: 3, output: 15, long_context_above: 10, long_context: {input: 6, output: 22.5}}\n", "s-1")
	f.Add("models: {\"\": {input: -1}}", "")
	f.Fuzz(func(t *testing.T, doc, model string) {
		var c pricing.Config
		if yaml.Unmarshal([]byte(doc), &c) != nil {
			return
		}
		tab, err := pricing.NewTable(c)
		if err != nil {
			if c.Validate() == nil {
				t.Fatalf("NewTable failed on a valid config: %v", err)
			}
			return
		}
		m, err := tab.Lookup(model)
		if err != nil {
			if c.Unknown != pricing.UnknownRefuse || !strings.Contains(err.Error(), "no price") {
				t.Fatalf("lookup %q: %v", model, err)
			}
			return
		}
		if m.Price.Validate() != nil {
			t.Fatalf("lookup %q gave an invalid price %+v", model, m.Price)
		}
		if m.Price.Worst(provider.Cost{InputTokens: 1 << 20, OutputTokens: 1 << 20}, provider.CachePrefix{}) < 0 ||
			m.Price.Cost(llm.OpenAI, llm.Usage{InputTokens: 10, OutputTokens: 10, CacheReadInputTokens: 99}) < 0 {
			t.Fatal("negative cost")
		}
	})
}
