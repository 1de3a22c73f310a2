package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		p      llm.Protocol
		body   string
		want   llm.Usage
		wantOK bool
	}{
		{"anthropic spec response", llm.Anthropic, anthropicMessage, llm.Usage{InputTokens: 10, OutputTokens: 34, ServiceTier: "standard"}, true},
		{"anthropic cache counts", llm.Anthropic, `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation_input_tokens":700,"cache_read_input_tokens":800}}`,
			llm.Usage{InputTokens: 5, OutputTokens: 6, CacheCreationInputTokens: 700, CacheReadInputTokens: 800}, true},
		{"anthropic null cache counts", llm.Anthropic, `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}`,
			llm.Usage{InputTokens: 5, OutputTokens: 6}, true},
		{"openai spec response", llm.OpenAI, openAICompletion, llm.Usage{InputTokens: 9, OutputTokens: 3, ServiceTier: "default"}, true},
		{"openai cached tokens stay inside input", llm.OpenAI, `{"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920}}}`,
			llm.Usage{InputTokens: 2006, OutputTokens: 300, CacheReadInputTokens: 1920}, true},
		{"openai responses api usage", llm.OpenAI, `{"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":10},"output_tokens":87,"total_tokens":123}}`,
			llm.Usage{InputTokens: 36, OutputTokens: 87, CacheReadInputTokens: 10}, true},
		{"anthropic cache split, thinking and tier", llm.Anthropic, anthropicCachedMessage,
			llm.Usage{InputTokens: 3, OutputTokens: 40, CacheCreationInputTokens: 3000, CacheReadInputTokens: 2000,
				CacheCreation5mInputTokens: 1000, CacheCreation1hInputTokens: 2000, ReasoningTokens: 12, ServiceTier: "priority"}, true},
		{"responses object", llm.OpenAI, responsesObject, llm.Usage{InputTokens: 36, OutputTokens: 87, ServiceTier: "flex"}, true},
		{"responses reasoning and cached", llm.OpenAI, `{"service_tier":"priority","usage":{"input_tokens":2000,"input_tokens_details":{"cached_tokens":1920},"output_tokens":500,"output_tokens_details":{"reasoning_tokens":320},"total_tokens":2500}}`,
			llm.Usage{InputTokens: 2000, OutputTokens: 500, CacheReadInputTokens: 1920, ReasoningTokens: 320, ServiceTier: "priority"}, true},
		{"chat reasoning", llm.OpenAI, `{"usage":{"prompt_tokens":5,"completion_tokens":9,"completion_tokens_details":{"reasoning_tokens":4}}}`,
			llm.Usage{InputTokens: 5, OutputTokens: 9, ReasoningTokens: 4}, true},
		{"embeddings", llm.OpenAI, embeddingsList, llm.Usage{InputTokens: 8}, true},
		{"queued background response", llm.OpenAI, `{"id":"resp_1","status":"queued","usage":null,"service_tier":"auto"}`, llm.Usage{}, false},
		{"odd new fields are ignored, not fatal", llm.Anthropic, `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation":"x","service_tier":7,"output_tokens_details":[1]}}`,
			llm.Usage{InputTokens: 5, OutputTokens: 6}, true},
		{"a top-level tier that is not a string", llm.OpenAI, `{"service_tier":{"x":1},"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			llm.Usage{InputTokens: 1, OutputTokens: 2}, true},
		{"usage tier wins over the top level", llm.Anthropic, `{"service_tier":"a","usage":{"input_tokens":1,"output_tokens":1,"service_tier":"batch"}}`,
			llm.Usage{InputTokens: 1, OutputTokens: 1, ServiceTier: "batch"}, true},
		{"negative read as zero", llm.Anthropic, `{"usage":{"input_tokens":-1,"output_tokens":3}}`, llm.Usage{OutputTokens: 3}, true},
		{"no usage", llm.Anthropic, `{"id":"x"}`, llm.Usage{}, false},
		{"null usage", llm.OpenAI, `{"usage":null}`, llm.Usage{}, false},
		{"empty usage object", llm.OpenAI, `{"usage":{}}`, llm.Usage{}, false},
		{"usage wrong type", llm.Anthropic, `{"usage":{"input_tokens":"5"}}`, llm.Usage{}, false},
		{"not json", llm.OpenAI, `<html>`, llm.Usage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := provider.ParseUsage(tt.p, []byte(tt.body))
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
