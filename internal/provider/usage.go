package provider

import (
	"encoding/json"

	"github.com/sluicehq/sluice/internal/llm"
)

// wireUsage is the union of the usage objects: Anthropic (input_tokens,
// output_tokens, cache_*), OpenAI Chat Completions (prompt_tokens,
// completion_tokens, prompt_tokens_details.cached_tokens) and OpenAI
// Responses (input_tokens, output_tokens, input_tokens_details).
type wireUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`

	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// ParseUsage reads the usage of a non-streaming response body.
//
// Anthropic: InputTokens, OutputTokens, CacheCreationInputTokens and
// CacheReadInputTokens as reported; InputTokens excludes cached tokens, as
// Anthropic's ITPM counts input + cache creation but not cache reads.
//
// OpenAI: InputTokens = prompt_tokens, which INCLUDES cached tokens (OpenAI
// charges them against TPM), OutputTokens = completion_tokens, and
// CacheReadInputTokens = prompt_tokens_details.cached_tokens (informational:
// already inside InputTokens). Responses API bodies (input_tokens,
// output_tokens, input_tokens_details) are read the same way.
//
// It reports false when the body has no readable usage object. Negative
// counts are read as 0.
func ParseUsage(p llm.Protocol, body []byte) (llm.Usage, bool) {
	if u, found, ok := scanUsageDoc(p, body); ok {
		return u, found
	}
	return parseUsageReference(p, body)
}

// parseUsageReference is ParseUsage by encoding/json: the definition the
// scanner (scanUsageDoc) reproduces, and its fallback.
func parseUsageReference(p llm.Protocol, body []byte) (llm.Usage, bool) {
	var top struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(body, &top) != nil {
		return llm.Usage{}, false
	}
	return usageFrom(p, top.Usage)
}

func usageFrom(p llm.Protocol, raw json.RawMessage) (llm.Usage, bool) {
	if len(raw) == 0 || isNull(raw) {
		return llm.Usage{}, false
	}
	var w wireUsage
	if json.Unmarshal(raw, &w) != nil {
		return llm.Usage{}, false
	}
	return w.usage(p)
}

// usage reads the counts of a decoded usage object.
func (w *wireUsage) usage(p llm.Protocol) (llm.Usage, bool) {
	var u llm.Usage
	if p == llm.OpenAI && (w.PromptTokens != nil || w.CompletionTokens != nil) {
		u.InputTokens = count(w.PromptTokens)
		u.OutputTokens = count(w.CompletionTokens)
		if w.PromptTokensDetails != nil {
			u.CacheReadInputTokens = count(w.PromptTokensDetails.CachedTokens)
		}
		return u, true
	}
	if w.InputTokens == nil && w.OutputTokens == nil {
		return llm.Usage{}, false
	}
	u.InputTokens = count(w.InputTokens)
	u.OutputTokens = count(w.OutputTokens)
	u.CacheCreationInputTokens = count(w.CacheCreationInputTokens)
	u.CacheReadInputTokens = count(w.CacheReadInputTokens)
	if p == llm.OpenAI && w.InputTokensDetails != nil {
		u.CacheReadInputTokens = count(w.InputTokensDetails.CachedTokens)
	}
	return u, true
}

func count(p *int64) int64 {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}
