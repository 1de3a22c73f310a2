package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestMinCacheableTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p     llm.Protocol
		model string
		want  int64
	}{
		{llm.Anthropic, "claude-opus-5", 512},
		{llm.Anthropic, "claude-sonnet-5-5", 512},
		{llm.Anthropic, "claude-sonnet-5", 1024},
		{llm.Anthropic, "claude-opus-4-8", 1024},
		{llm.Anthropic, "claude-opus-4-7", 2048},
		{llm.Anthropic, "claude-opus-4-6", 4096},
		{llm.Anthropic, "claude-opus-4-5-20251101", 4096},
		{llm.Anthropic, "claude-sonnet-4-6", 1024},
		{llm.Anthropic, "claude-sonnet-4-5-20250929", 1024},
		{llm.Anthropic, "claude-haiku-4-5-20251001", 4096},
		{llm.Anthropic, "claude-3-5-haiku-20241022", 2048},
		{llm.Anthropic, "claude-3-haiku-20240307", 2048},
		{llm.Anthropic, "claude-3-7-sonnet-20250219", 1024},
		{llm.Anthropic, "some-future-model", 1024},
		{llm.OpenAI, "gpt-4.1", 1024},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, provider.MinCacheableTokens(tt.p, tt.model), tt.model)
	}
}

// TestRateLimitedInputTokens is the input rate-limit counting rule: Anthropic
// ITPM counts uncached input and cache writes, cache reads only for the †
// models; OpenAI TPM counts every input token, cached or not.
func TestRateLimitedInputTokens(t *testing.T) {
	t.Parallel()
	cached := llm.Usage{InputTokens: 100, CacheCreationInputTokens: 1000, CacheReadInputTokens: 5000, OutputTokens: 7}
	tests := []struct {
		name  string
		p     llm.Protocol
		model string
		u     llm.Usage
		want  int64
	}{
		{"sonnet: reads free", llm.Anthropic, "claude-sonnet-4-5", cached, 1100},
		{"opus 5: reads free", llm.Anthropic, "claude-opus-5", cached, 1100},
		{"haiku 4.5: reads free", llm.Anthropic, "claude-haiku-4-5", cached, 1100},
		{"haiku 3.5 †: reads counted", llm.Anthropic, "claude-3-5-haiku-20241022", cached, 6100},
		{"haiku 3 †: reads counted", llm.Anthropic, "claude-3-haiku-20240307", cached, 6100},
		{"openai: all input, cached inside", llm.OpenAI, "gpt-4.1", llm.Usage{InputTokens: 2006, CacheReadInputTokens: 1920, OutputTokens: 300}, 2006},
		{"negative counts", llm.Anthropic, "claude-sonnet-4-5", llm.Usage{InputTokens: -1, CacheCreationInputTokens: 3}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, provider.RateLimitedInputTokens(tt.p, tt.model, tt.u))
		})
	}
}
