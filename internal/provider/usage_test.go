package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/provider"
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		p      provider.Protocol
		body   string
		want   provider.Usage
		wantOK bool
	}{
		{"anthropic spec response", provider.Anthropic, anthropicMessage, provider.Usage{InputTokens: 10, OutputTokens: 34}, true},
		{"anthropic cache counts", provider.Anthropic, `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation_input_tokens":700,"cache_read_input_tokens":800}}`,
			provider.Usage{InputTokens: 5, OutputTokens: 6, CacheCreationInputTokens: 700, CacheReadInputTokens: 800}, true},
		{"anthropic null cache counts", provider.Anthropic, `{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}`,
			provider.Usage{InputTokens: 5, OutputTokens: 6}, true},
		{"openai spec response", provider.OpenAI, openAICompletion, provider.Usage{InputTokens: 9, OutputTokens: 3}, true},
		{"openai cached tokens stay inside input", provider.OpenAI, `{"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920}}}`,
			provider.Usage{InputTokens: 2006, OutputTokens: 300, CacheReadInputTokens: 1920}, true},
		{"openai responses api usage", provider.OpenAI, `{"usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":10},"output_tokens":87,"total_tokens":123}}`,
			provider.Usage{InputTokens: 36, OutputTokens: 87, CacheReadInputTokens: 10}, true},
		{"negative read as zero", provider.Anthropic, `{"usage":{"input_tokens":-1,"output_tokens":3}}`, provider.Usage{OutputTokens: 3}, true},
		{"no usage", provider.Anthropic, `{"id":"x"}`, provider.Usage{}, false},
		{"null usage", provider.OpenAI, `{"usage":null}`, provider.Usage{}, false},
		{"empty usage object", provider.OpenAI, `{"usage":{}}`, provider.Usage{}, false},
		{"usage wrong type", provider.Anthropic, `{"usage":{"input_tokens":"5"}}`, provider.Usage{}, false},
		{"not json", provider.OpenAI, `<html>`, provider.Usage{}, false},
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
