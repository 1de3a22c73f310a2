package llm

import "github.com/sluicehq/sluice/upstream"

// Protocol names a provider wire protocol. It is the public
// upstream.Protocol, defined there once.
type Protocol = upstream.Protocol

// The protocols Sluice speaks.
const (
	// Anthropic is the Anthropic Messages API (POST /v1/messages).
	Anthropic = upstream.Anthropic
	// OpenAI is the OpenAI Chat Completions API (POST /v1/chat/completions)
	// and OpenAI-compatible gateways.
	OpenAI = upstream.OpenAI
)

// ParseProtocol returns the Protocol named s, or an error naming the choices.
func ParseProtocol(s string) (Protocol, error) { return upstream.ParseProtocol(s) }

// Usage is what a response reports it consumed. The two protocols count
// input differently: Anthropic's InputTokens is only the uncached input
// (after the last cache breakpoint), with cache writes and reads beside it;
// OpenAI's InputTokens is every input token, CacheReadInputTokens among
// them.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
	// CacheCreation5mInputTokens and CacheCreation1hInputTokens split
	// CacheCreationInputTokens by the TTL written (Anthropic
	// usage.cache_creation.ephemeral_5m_input_tokens and
	// ephemeral_1h_input_tokens); both 0 when the response has no split.
	CacheCreation5mInputTokens int64 `json:"cache_creation_5m_input_tokens,omitempty"`
	CacheCreation1hInputTokens int64 `json:"cache_creation_1h_input_tokens,omitempty"`
	// ReasoningTokens are output tokens spent reasoning, already inside
	// OutputTokens (OpenAI output_tokens_details.reasoning_tokens or
	// completion_tokens_details.reasoning_tokens, Anthropic
	// output_tokens_details.thinking_tokens).
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
	// ServiceTier is the tier that served the request, as the provider
	// reports it (Anthropic usage.service_tier: standard, priority, batch;
	// OpenAI service_tier: default, flex, priority, scale); empty when not
	// reported.
	ServiceTier string `json:"service_tier,omitempty"`
}
