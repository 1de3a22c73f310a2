package mock

import (
	"fmt"
	"slices"
	"strings"
)

// presets are the limit tables of the provider documentation (spec §1.2 and
// §2.1). They are illustrative: providers change them, and real limits depend
// on the organization.
var presets = map[string]Limits{
	// Anthropic 2025 tiers, Claude Sonnet 4.x (RPM / ITPM / OTPM), and the
	// token-counting page's RPM of the same tier.
	"anthropic-tier1": {RPM: 50, ITPM: 30_000, OTPM: 8_000, CountTokensRPM: 100},
	"anthropic-tier2": {RPM: 1_000, ITPM: 450_000, OTPM: 90_000, CountTokensRPM: 2_000},
	"anthropic-tier3": {RPM: 2_000, ITPM: 800_000, OTPM: 160_000, CountTokensRPM: 4_000},
	"anthropic-tier4": {RPM: 4_000, ITPM: 2_000_000, OTPM: 400_000, CountTokensRPM: 8_000},
	// Anthropic 2026 tiers, Claude Sonnet 4.x.
	"anthropic-start": {RPM: 1_000, ITPM: 2_000_000, OTPM: 400_000, CountTokensRPM: 5_000},
	"anthropic-build": {RPM: 5_000, ITPM: 5_000_000, OTPM: 1_000_000, CountTokensRPM: 10_000},
	"anthropic-scale": {RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000, CountTokensRPM: 20_000},
	// OpenAI-like examples taken from real 429 messages and headers (§2.1,
	// §2.2); OpenAI's own tables vary by model and tier.
	"openai-tier1-like": {RPM: 500, TPM: 200_000},
	"openai-tier2-like": {RPM: 5_000, TPM: 2_000_000},
	"openai-small":      {RPM: 60, TPM: 150_000},
}

// Preset returns the named limit table. Names are listed by PresetNames.
func Preset(name string) (Limits, error) {
	if name == "" {
		return Limits{}, nil
	}
	l, ok := presets[name]
	if !ok {
		return Limits{}, fmt.Errorf("unknown preset %q (want one of %s)", name, strings.Join(PresetNames(), ", "))
	}
	return l, nil
}

// PresetNames returns the names Preset accepts, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
