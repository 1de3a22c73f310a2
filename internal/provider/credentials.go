package provider

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/llm"
)

// AnthropicVersionDefault is sent as anthropic-version when the client did
// not send one.
const AnthropicVersionDefault = "2023-06-01"

// SetUpstreamHeaders puts what protocol p expects on every request into h,
// which already holds the client's cleaned headers: the upstream's key
// (Anthropic x-api-key, OpenAI Authorization: Bearer; nothing when key is
// empty), Anthropic's anthropic-version when the client sent none, and,
// when jsonBody is true, content-type: application/json when the client
// sent none. The dispatcher calls it for every attempt and the gateway's
// pass-through proxy for everything else, so a key is placed one way.
func SetUpstreamHeaders(h http.Header, p llm.Protocol, key string, jsonBody bool) {
	switch p {
	case llm.OpenAI:
		if key != "" {
			h.Set("Authorization", "Bearer "+key)
		}
	default:
		if key != "" {
			h.Set("X-Api-Key", key)
		}
		if h.Get("Anthropic-Version") == "" {
			h.Set("Anthropic-Version", AnthropicVersionDefault)
		}
	}
	if jsonBody && h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
}
