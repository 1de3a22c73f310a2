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

// Usage is what a response reports it consumed.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
}
