package provider

import (
	"encoding/json"

	"github.com/sluicehq/sluice/internal/llm"
)

// wireUsage is the union of the usage objects: Anthropic (input_tokens,
// output_tokens, cache_*, cache_creation, service_tier,
// output_tokens_details.thinking_tokens), OpenAI Chat Completions and
// embeddings (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens,
// completion_tokens_details.reasoning_tokens) and OpenAI Responses
// (input_tokens, output_tokens, input_tokens_details.cached_tokens,
// output_tokens_details.reasoning_tokens).
//
// The fields read since issue 25 (the cache_creation split, the reasoning
// counts and service_tier) are read leniently: a value of an unexpected
// shape is ignored instead of costing the whole usage, which a caller read
// before them.
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

	CacheCreation           json.RawMessage `json:"cache_creation"`
	OutputTokensDetails     json.RawMessage `json:"output_tokens_details"`
	CompletionTokensDetails json.RawMessage `json:"completion_tokens_details"`
	ServiceTier             json.RawMessage `json:"service_tier"`
}

// cacheCreationSplit, outputDetails and completionDetails are the lenient
// detail objects of wireUsage.
type (
	cacheCreationSplit struct {
		Ephemeral5m *int64 `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h *int64 `json:"ephemeral_1h_input_tokens"`
	}
	outputDetails struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
		ThinkingTokens  *int64 `json:"thinking_tokens"`
	}
	completionDetails struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	}
)

// lenient decodes raw into v, leaving v zero when raw is of another shape.
func lenient[T any](raw json.RawMessage) T {
	var v T
	if len(raw) > 0 && json.Unmarshal(raw, &v) != nil {
		var zero T
		return zero
	}
	return v
}

// ParseUsage reads the usage of a non-streaming response body: a message,
// a chat completion, a Response object or an embeddings list.
//
// Anthropic: InputTokens, OutputTokens, CacheCreationInputTokens and
// CacheReadInputTokens as reported; InputTokens excludes cached tokens, as
// Anthropic's ITPM counts input + cache creation but not cache reads. The
// cache_creation split fills CacheCreation5mInputTokens and
// CacheCreation1hInputTokens, usage.service_tier ServiceTier,
// output_tokens_details.thinking_tokens ReasoningTokens.
//
// OpenAI: InputTokens = prompt_tokens, which INCLUDES cached tokens (OpenAI
// charges them against TPM), OutputTokens = completion_tokens, and
// CacheReadInputTokens = prompt_tokens_details.cached_tokens (informational:
// already inside InputTokens). Responses API bodies (input_tokens,
// output_tokens, input_tokens_details) are read the same way; embeddings
// report prompt_tokens only. ReasoningTokens comes from
// completion_tokens_details or output_tokens_details, ServiceTier from the
// body's top-level service_tier.
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
		Usage       json.RawMessage `json:"usage"`
		ServiceTier json.RawMessage `json:"service_tier"`
	}
	if json.Unmarshal(body, &top) != nil {
		return llm.Usage{}, false
	}
	u, ok := usageFrom(p, top.Usage)
	if ok && u.ServiceTier == "" {
		u.ServiceTier = lenient[string](top.ServiceTier)
	}
	return u, ok
}

func usageFrom(p llm.Protocol, raw json.RawMessage) (llm.Usage, bool) {
	if len(raw) == 0 || isNull(raw) {
		return llm.Usage{}, false
	}
	var w wireUsage
	if json.Unmarshal(raw, &w) != nil {
		return llm.Usage{}, false
	}
	return w.counts().usage(p)
}

// usageCounts are the values of a usage object, as the reference (from a
// decoded wireUsage) and the scanner both read them. A nil pointer is an
// absent count; the details flags say whether the strict detail objects
// were present.
type usageCounts struct {
	input, output, cacheCreation, cacheRead, prompt, completion *int64

	hasPromptDetails, hasInputDetails bool
	promptCached, inputCached         *int64

	split5m, split1h                 *int64
	reasoning, thinking, compReasons *int64
	tier                             string
}

func (w *wireUsage) counts() usageCounts {
	c := usageCounts{input: w.InputTokens, output: w.OutputTokens, cacheCreation: w.CacheCreationInputTokens,
		cacheRead: w.CacheReadInputTokens, prompt: w.PromptTokens, completion: w.CompletionTokens}
	if w.PromptTokensDetails != nil {
		c.hasPromptDetails, c.promptCached = true, w.PromptTokensDetails.CachedTokens
	}
	if w.InputTokensDetails != nil {
		c.hasInputDetails, c.inputCached = true, w.InputTokensDetails.CachedTokens
	}
	split := lenient[cacheCreationSplit](w.CacheCreation)
	c.split5m, c.split1h = split.Ephemeral5m, split.Ephemeral1h
	out := lenient[outputDetails](w.OutputTokensDetails)
	c.reasoning, c.thinking = out.ReasoningTokens, out.ThinkingTokens
	c.compReasons = lenient[completionDetails](w.CompletionTokensDetails).ReasoningTokens
	c.tier = lenient[string](w.ServiceTier)
	return c
}

// usage maps a usage object's values to llm.Usage.
func (c usageCounts) usage(p llm.Protocol) (llm.Usage, bool) {
	u := llm.Usage{ServiceTier: c.tier}
	if p == llm.OpenAI && (c.prompt != nil || c.completion != nil) {
		u.InputTokens = count(c.prompt)
		u.OutputTokens = count(c.completion)
		if c.hasPromptDetails {
			u.CacheReadInputTokens = count(c.promptCached)
		}
		u.ReasoningTokens = count(c.compReasons)
		return u, true
	}
	if c.input == nil && c.output == nil {
		return llm.Usage{}, false
	}
	u.InputTokens = count(c.input)
	u.OutputTokens = count(c.output)
	u.CacheCreationInputTokens = count(c.cacheCreation)
	u.CacheReadInputTokens = count(c.cacheRead)
	if p == llm.OpenAI {
		if c.hasInputDetails {
			u.CacheReadInputTokens = count(c.inputCached)
		}
		u.ReasoningTokens = count(c.reasoning)
		return u, true
	}
	u.CacheCreation5mInputTokens = count(c.split5m)
	u.CacheCreation1hInputTokens = count(c.split1h)
	u.ReasoningTokens = count(c.thinking)
	return u, true
}

func count(p *int64) int64 {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}
