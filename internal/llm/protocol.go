package llm

import "fmt"

// Protocol names a provider wire protocol.
type Protocol string

// The protocols Sluice speaks.
const (
	// Anthropic is the Anthropic Messages API (POST /v1/messages).
	Anthropic Protocol = "anthropic"
	// OpenAI is the OpenAI Chat Completions API (POST /v1/chat/completions)
	// and OpenAI-compatible gateways.
	OpenAI Protocol = "openai"
)

// ParseProtocol returns the Protocol named s, or an error naming the choices.
func ParseProtocol(s string) (Protocol, error) {
	switch Protocol(s) {
	case Anthropic, OpenAI:
		return Protocol(s), nil
	}
	return "", fmt.Errorf("unknown protocol %q (want anthropic or openai)", s)
}

// Usage is what a response reports it consumed.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
}
