package upstream

import "fmt"

// Protocol names a provider wire protocol.
type Protocol string

// The protocols Sluice speaks.
const (
	// Anthropic is the Anthropic Messages API (POST /v1/messages).
	Anthropic Protocol = "anthropic"
	// OpenAI is the OpenAI Chat Completions API (POST /v1/chat/completions),
	// also spoken by many OpenAI-compatible gateways.
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
