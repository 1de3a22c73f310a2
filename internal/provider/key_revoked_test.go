package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// TestKeyRevoked: the answers that take a key out of its pool, classified
// from real error bodies, and those that never do.
func TestKeyRevoked(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		p      llm.Protocol
		status int
		body   string
		want   bool
	}{
		{"anthropic 401", llm.Anthropic, 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, true},
		{"anthropic 403", llm.Anthropic, 403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission"}}`, true},
		{"anthropic credit", llm.Anthropic, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, true},
		{"openai invalid key", llm.OpenAI, 401, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, true},
		{"openai insufficient_quota", llm.OpenAI, 429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, true},
		{"access terminated", llm.OpenAI, 429, `{"error":{"message":"Access terminated due to violation of our policies","type":"access_terminated"}}`, true},
		{"ordinary 429", llm.OpenAI, 429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, false},
		{"request too large", llm.OpenAI, 429, `{"error":{"message":"Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 50000.","type":"tokens","code":"rate_limit_exceeded"}}`, false},
		{"overloaded", llm.Anthropic, 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false},
		{"server error", llm.OpenAI, 500, `{"error":{"message":"The server had an error"}}`, false},
		{"bad request", llm.Anthropic, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := provider.Classify(tt.p, tt.status, http.Header{}, []byte(tt.body), now)
			require.Equal(t, tt.want, provider.KeyRevoked(o), "%+v", o)
		})
	}
}
