package provider

import (
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
)

// The providers' prompt-caching rules that admission needs (docs/mock.md
// "Prompt caching" gives the sources). The mock keeps its own copy of these
// tables on purpose: it is the oracle these rules are tested against.

// OpenAI caches prompts of OpenAICacheMinTokens tokens or more, with hits
// in increments of OpenAICacheIncrementTokens.
const (
	OpenAICacheMinTokens       = 1024
	OpenAICacheIncrementTokens = 128
)

// anthropicMinCacheable is Anthropic's minimum cacheable prompt length per
// model, matched by name fragment, first match wins (prompt-caching page,
// "Cache limitations", 2026 revision).
var anthropicMinCacheable = []struct {
	fragment string
	tokens   int64
}{
	{"sonnet-5-5", 512},
	{"opus-5", 512},
	{"fable-5", 512},
	{"mythos-5", 512},
	{"haiku-5", 512},
	{"sonnet-5", 1024},
	{"mythos-preview", 2048},
	{"opus-4-7", 2048},
	{"opus-4-6", 4096},
	{"opus-4-5", 4096},
	{"haiku-4-5", 4096},
	{"3-5-haiku", 2048},
	{"haiku-3-5", 2048},
	{"3-haiku", 2048},
	{"haiku-3", 2048},
}

// anthropicMinCacheableDefault covers Opus 4.8, Sonnet 4.x, Opus 4.1, Opus
// 4, Sonnet 3.7 and names the table does not know.
const anthropicMinCacheableDefault = 1024

// MinCacheableTokens is the shortest prefix protocol p caches for model:
// Anthropic's per-model minimum, OpenAI's OpenAICacheMinTokens.
func MinCacheableTokens(p llm.Protocol, model string) int64 {
	if p != llm.Anthropic {
		return OpenAICacheMinTokens
	}
	for _, m := range anthropicMinCacheable {
		if strings.Contains(model, m.fragment) {
			return m.tokens
		}
	}
	return anthropicMinCacheableDefault
}

// cacheReadsCountTowardITPM are the Anthropic models marked † in the
// rate-limit tables ("Limit counts cache_read_input_tokens towards ITPM
// usage"): Claude Haiku 3.5, and Haiku 3 in the 2025 revision.
var cacheReadsCountTowardITPM = []string{"3-5-haiku", "haiku-3-5", "3-haiku", "haiku-3"}

// CacheReadsCountTowardITPM reports whether an Anthropic model's ITPM limit
// counts cache reads (only the † models do).
func CacheReadsCountTowardITPM(model string) bool {
	for _, f := range cacheReadsCountTowardITPM {
		if strings.Contains(model, f) {
			return true
		}
	}
	return false
}

// RateLimitedInputTokens is the input a response's usage took from the
// provider's input rate limit. Anthropic's ITPM counts input_tokens +
// cache_creation_input_tokens, and cache_read_input_tokens only for the
// models of CacheReadsCountTowardITPM ("For most Claude models, only
// uncached input tokens count towards your ITPM rate limits"). OpenAI's TPM
// counts every input token, cached or not (prompt-caching FAQ: "Do cached
// prompts contribute to TPM rate limits? Yes, as caching does not affect
// rate limits"), and its InputTokens already includes the cached ones.
func RateLimitedInputTokens(p llm.Protocol, model string, u llm.Usage) int64 {
	if p != llm.Anthropic {
		return max(0, u.InputTokens)
	}
	n := max(0, u.InputTokens) + max(0, u.CacheCreationInputTokens)
	if CacheReadsCountTowardITPM(model) {
		n += max(0, u.CacheReadInputTokens)
	}
	return n
}
