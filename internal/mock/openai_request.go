package mock

import (
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI Chat Completions bodies, and the parameters Chat Completions and
// Responses share (service_tier, prompt_cache_key, prompt_cache_retention).
// The prompt is tools (their raw JSON, one block), then each message's
// content: a string or each text part's text, tool_calls as raw JSON.

var openAIRoles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// openAITiers are the service_tier values the mock accepts ("fast" is
// served as "priority").
var openAITiers = []string{"auto", "default", "flex", "scale", "priority", "fast"}

// openAIShared reads service_tier, prompt_cache_key and
// prompt_cache_retention into r and p.
func openAIShared(top map[string]json.RawMessage, r *request, p *prompt) *apiError {
	if present(top["service_tier"]) {
		if json.Unmarshal(top["service_tier"], &r.tier) != nil || !contains(openAITiers, r.tier) {
			return openAIInvalid("service_tier", "invalid_value", "Invalid value for 'service_tier': supported values are '%s'.",
				strings.Join(openAITiers, "', '"))
		}
	}
	if present(top["prompt_cache_key"]) {
		if json.Unmarshal(top["prompt_cache_key"], &p.ns) != nil {
			return openAIInvalid("prompt_cache_key", "invalid_type", "Invalid type for 'prompt_cache_key': expected a string.")
		}
	}
	r.cacheTTL = openAICacheTTL
	if present(top["prompt_cache_retention"]) {
		var ret string
		_ = json.Unmarshal(top["prompt_cache_retention"], &ret)
		switch ret {
		case "in_memory", "in-memory":
		case "24h":
			r.cacheTTL = openAICacheTTLExtended
		default:
			return openAIInvalid("prompt_cache_retention", "invalid_value",
				"Invalid value for 'prompt_cache_retention': supported values are 'in_memory' and '24h'.")
		}
	}
	return nil
}

// parseOpenAI parses a Chat Completions body; defaultMax is the per-choice
// reservation when the body names none.
func parseOpenAI(body []byte, defaultMax int64) (request, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return request{}, openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err)
	}
	r := request{n: 1, bodyHash: bodyHash(body), maxTokens: defaultMax}
	if !present(top["model"]) {
		return request{}, openAIInvalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return request{}, openAIInvalid("model", "invalid_type", "Invalid type for 'model': expected a non-empty string.")
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens"} { // the latter wins
		if present(top[f]) {
			if err := json.Unmarshal(top[f], &r.maxTokens); err != nil || r.maxTokens < 1 {
				return request{}, openAIInvalid(f, "invalid_value", "Invalid '%s': expected an integer >= 1.", f)
			}
		}
	}
	if present(top["n"]) {
		if err := json.Unmarshal(top["n"], &r.n); err != nil || r.n < 1 || r.n > 128 {
			return request{}, openAIInvalid("n", "invalid_value", "Invalid 'n': expected an integer between 1 and 128.")
		}
	}
	if present(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &r.stream); err != nil {
			return request{}, openAIInvalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean.")
		}
	}
	if present(top["stream_options"]) {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(top["stream_options"], &so); err != nil {
			return request{}, openAIInvalid("stream_options", "invalid_type", "Invalid type for 'stream_options': expected an object.")
		}
		r.includeUsage = so.IncludeUsage
	}
	p := &prompt{model: r.model}
	if aerr := openAIShared(top, &r, p); aerr != nil {
		return request{}, aerr
	}
	if !present(top["messages"]) {
		return request{}, openAIInvalid("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return request{}, openAIInvalid("messages", "invalid_type", "Invalid type for 'messages': expected an array of objects.")
	}
	if len(msgs) == 0 {
		return request{}, openAIInvalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	if present(top["tools"]) {
		p.add(string(top["tools"]))
	}
	for i, m := range msgs {
		var role string
		if m == nil || json.Unmarshal(m["role"], &role) != nil || !contains(openAIRoles, role) {
			return request{}, openAIInvalid(fmt.Sprintf("messages[%d].role", i), "invalid_value",
				"Invalid value for 'messages[%d].role': supported values are %s.", i, "'"+strings.Join(openAIRoles, "', '")+"'")
		}
		if c := m["content"]; present(c) {
			var s string
			if json.Unmarshal(c, &s) == nil {
				p.add(s)
				continue
			}
			var parts []struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return request{}, openAIInvalid(fmt.Sprintf("messages[%d].content", i), "invalid_type",
					"Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i)
			}
			for _, pt := range parts {
				if pt.Text != nil {
					p.add(*pt.Text)
				}
			}
		}
		if tc := m["tool_calls"]; present(tc) {
			p.add(string(tc))
		}
	}
	r.prompt = p
	r.inputTokens = p.tokens()
	return r, nil
}
