package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// CachePrefix identifies the part of a request a provider can serve from
// its prompt cache. A provider's cache belongs to one key's organization or
// workspace and one model: requests that share a prefix share its cache
// entry only when they are sent on the same key, so the prefix is what
// cache-aware admission and key affinity look at.
type CachePrefix struct {
	// Hash is a stable digest (32 hex digits) of the model, the
	// prompt_cache_key (OpenAI), the previous_response_id (Responses) and
	// the prefix's content without its cache_control markers: equal hashes
	// mean equal prefixes, across requests and processes.
	Hash string
	// Route is the digest of the model, the prompt_cache_key and the
	// prompt's first RouteBytes bytes: what OpenAI routes requests on ("a
	// hash of the initial prefix of the prompt … typically the first 256
	// tokens", combined with prompt_cache_key). It stays the same as a
	// conversation grows, so requests that share it should share a key.
	Route string
	// Tokens is the prefix's estimated tokens.
	Tokens int64
	// Cacheable reports whether the provider will cache the prefix:
	// Anthropic, a cache_control breakpoint and Tokens at least the model's
	// minimum (MinCacheableTokens); OpenAI, Tokens at least 1024.
	Cacheable bool
	// TTL is how long the provider keeps it unused: Anthropic the longest
	// breakpoint's TTL (5 minutes, or 1 hour); OpenAI 0, the provider's own
	// choice (5 to 10 minutes in memory, up to 24 hours with
	// prompt_cache_retention "24h").
	TTL time.Duration
	// Blocks are the prefix's block boundaries in order (Anthropic: each
	// tool, system block and message block; OpenAI: each message or input
	// item): the prefix up to each, hashed as Hash is (the last one's Hash
	// is Hash) with its estimated tokens. A provider's cache hit is the
	// longest of them it holds, so a conversation that grows by a turn
	// still finds the previous turn's prefix.
	Blocks []PrefixBlock
}

// PrefixBlock is a prefix up to one block boundary.
type PrefixBlock struct {
	// Hash digests the prefix up to and including the block.
	Hash string
	// Tokens is the prefix's estimated tokens up to the block.
	Tokens int64
	// TTL is the block's cache_control TTL: 0 for a block without a
	// breakpoint (Anthropic writes the cache only at breakpoints; OpenAI
	// has none).
	TTL time.Duration
}

// AnthropicLookbackBlocks is how many blocks before a breakpoint Anthropic
// looks for a cache hit ("approximately 20 content blocks").
const AnthropicLookbackBlocks = 20

// RouteBytes is how much of the prompt CachePrefix.Route covers: about 256
// tokens.
const RouteBytes = 1024

// Anthropic cache TTLs.
const (
	CacheTTL5m = 5 * time.Minute
	CacheTTL1h = time.Hour
)

// CachePrefixOf finds the cacheable prefix of a request body for endpoint
// e of protocol p, its tokens counted by tc (nil means ByteCounter{}):
//
//   - Anthropic messages and count_tokens: tools, system, then messages,
//     up to and including the last block carrying cache_control (the whole
//     prompt with a top-level cache_control).
//   - OpenAI chat completions: the tools and every message but the last;
//     Responses: tools, instructions and every input item but the last
//     (after the previous turn, when previous_response_id names one).
//
// It reports false when there is none (no breakpoint; nothing before the
// last message; embeddings) or the body cannot be read.
func CachePrefixOf(p llm.Protocol, e Endpoint, body []byte, tc TokenCounter) (CachePrefix, bool) {
	if tc == nil {
		tc = ByteCounter{}
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return CachePrefix{}, false
	}
	var model string
	if json.Unmarshal(top["model"], &model) != nil || model == "" {
		return CachePrefix{}, false
	}
	w := prefixWriter{est: estimator{p: p, tc: tc}, h: sha256.New()}
	w.part("model", []byte(model))
	var ok bool
	switch {
	case p == llm.Anthropic && (e == EndpointChat || e == EndpointCountTokens):
		ok = w.anthropic(top)
	case p == llm.OpenAI && e == EndpointChat:
		ok = w.openAIChat(top)
	case p == llm.OpenAI && e == EndpointResponses:
		ok = w.responses(top)
	}
	if !ok || w.blocks == 0 {
		return CachePrefix{}, false
	}
	c := CachePrefix{Hash: w.sum(), Route: w.route(), Tokens: w.est.tokens, TTL: w.ttl, Blocks: w.bounds}
	if p == llm.Anthropic {
		c.Cacheable = c.Tokens >= MinCacheableTokens(p, model)
	} else {
		c.Cacheable = c.Tokens >= OpenAICacheMinTokens
	}
	return c, true
}

// prefixWriter hashes a prefix part by part and counts its tokens.
type prefixWriter struct {
	est    estimator
	h      hash.Hash
	stream []byte // the first RouteBytes bytes of the prompt's parts
	head   []byte // model and cache key, the route's seed
	blocks int
	ttl    time.Duration
	bounds []PrefixBlock
}

// bound records the prefix written so far as a block boundary.
func (w *prefixWriter) bound(ttl time.Duration) {
	w.bounds = append(w.bounds, PrefixBlock{Hash: w.sum(), Tokens: w.est.tokens, TTL: ttl})
}

func (w *prefixWriter) part(tag string, b []byte) {
	_, _ = w.h.Write([]byte(tag))
	_, _ = w.h.Write([]byte{0})
	_, _ = w.h.Write(b)
	_, _ = w.h.Write([]byte{0x1e})
	switch tag {
	case "model", "cache_key":
		w.head = append(append(w.head, tag...), b...)
		return
	case "previous_response":
		w.blocks++ // a prefix the body does not show
		return
	}
	w.blocks++
	if n := RouteBytes - len(w.stream); n > 0 {
		w.stream = append(w.stream, b[:min(n, len(b))]...)
	}
}

func (w *prefixWriter) sum() string { return hex.EncodeToString(w.h.Sum(nil)[:16]) }

func (w *prefixWriter) route() string {
	s := sha256.Sum256(append(append(w.head, 0), w.stream...))
	return hex.EncodeToString(s[:16])
}

// canonical is a block's JSON without cache_control, keys sorted, numbers
// as written: the same block gives the same bytes wherever its breakpoint
// moves.
func canonical(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return raw
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "cache_control")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// breakpoint reads a block's cache_control TTL: 0 when it has none.
func breakpoint(raw json.RawMessage) time.Duration {
	var b struct {
		CacheControl *struct {
			TTL string `json:"ttl"`
		} `json:"cache_control"`
	}
	if json.Unmarshal(raw, &b) != nil || b.CacheControl == nil {
		return 0
	}
	if b.CacheControl.TTL == "1h" {
		return CacheTTL1h
	}
	return CacheTTL5m
}

// anthropicPromptBlock is one block of an Anthropic prompt, in order.
type anthropicPromptBlock struct {
	tag   string
	raw   json.RawMessage
	text  *string // a string system or content, counted as text
	tool  bool
	first bool // the first block of a message: its overhead is counted with it
	ttl   time.Duration
}

func (w *prefixWriter) anthropic(top map[string]json.RawMessage) bool {
	var blocks []anthropicPromptBlock
	if raw, ok := top["tools"]; ok && !isNull(raw) {
		var tools []json.RawMessage
		if json.Unmarshal(raw, &tools) != nil {
			return false
		}
		for _, t := range tools {
			blocks = append(blocks, anthropicPromptBlock{tag: "tool", raw: t, tool: true, ttl: breakpoint(t)})
		}
	}
	content := func(tag string, raw json.RawMessage, message bool) bool {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			text := `{"text":` + strconv.Quote(s) + `,"type":"text"}`
			blocks = append(blocks, anthropicPromptBlock{tag: tag, raw: json.RawMessage(text), text: &s, first: message})
			return true
		}
		var bs []json.RawMessage
		if json.Unmarshal(raw, &bs) != nil {
			return false
		}
		for i, b := range bs {
			blocks = append(blocks, anthropicPromptBlock{tag: tag, raw: b, first: message && i == 0, ttl: breakpoint(b)})
		}
		return true
	}
	if raw, ok := top["system"]; ok && !isNull(raw) && !content("system", raw, false) {
		return false
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return false
	}
	for _, m := range msgs {
		if !content(m.Role, m.Content, true) {
			return false
		}
	}
	last := -1
	for i, b := range blocks {
		if b.ttl > 0 {
			last = i
			w.ttl = max(w.ttl, b.ttl)
		}
	}
	if raw, ok := top["cache_control"]; ok && !isNull(raw) && len(blocks) > 0 {
		last = len(blocks) - 1
		w.ttl = max(w.ttl, breakpoint(json.RawMessage(`{"cache_control":`+string(raw)+`}`)))
	}
	if last < 0 {
		return false
	}
	tools := false
	for i, b := range blocks[:last+1] {
		w.part(b.tag, canonical(b.raw))
		switch {
		case b.tool:
			if !tools {
				tools = true
				w.est.tokens += ToolUseSystemTokens
			}
			w.est.tool(b.raw)
		case b.text != nil:
			w.est.text(*b.text)
		default:
			_ = w.est.block(b.raw, "")
		}
		if b.first {
			w.est.tokens += MessageOverheadTokens
		}
		ttl := b.ttl
		if i == last {
			ttl = max(ttl, w.ttl) // a top-level cache_control marks the last block
		}
		w.bound(ttl)
	}
	return true
}

// tool counts one tool definition as estimator.tools does.
func (e *estimator) tool(raw json.RawMessage) {
	var td toolDef
	if json.Unmarshal(raw, &td) != nil {
		e.raw(raw)
		return
	}
	e.text(td.Name)
	e.text(td.Description)
	e.raw(td.InputSchema)
	if td.Function != nil {
		e.text(td.Function.Name)
		e.text(td.Function.Description)
		e.raw(td.Function.Parameters)
	}
}

// openAIKey hashes the prompt_cache_key.
func (w *prefixWriter) openAIKey(top map[string]json.RawMessage) {
	var key string
	if json.Unmarshal(top["prompt_cache_key"], &key) == nil && key != "" {
		w.part("cache_key", []byte(key))
	}
}

// openAITools hashes and counts the tools array.
func (w *prefixWriter) openAITools(top map[string]json.RawMessage, responses bool) bool {
	raw, ok := top["tools"]
	if !ok || isNull(raw) {
		return true
	}
	var tools []json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return false
	}
	if len(tools) == 0 {
		return true
	}
	w.part("tools", canonical(raw))
	if responses {
		return w.est.responseTools(top) == nil
	}
	return w.est.tools(top) == nil
}

func (w *prefixWriter) openAIChat(top map[string]json.RawMessage) bool {
	w.openAIKey(top)
	if !w.openAITools(top, false) {
		return false
	}
	var msgs []json.RawMessage
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return false
	}
	for i, m := range msgs[:max(0, len(msgs)-1)] {
		var wm wireMessage
		if json.Unmarshal(m, &wm) != nil {
			return false
		}
		w.part("message", canonical(m))
		w.est.tokens += MessageOverheadTokens
		w.est.text(wm.Name)
		w.est.raw(wm.ToolCalls)
		if w.est.content(wm.Content, "messages."+strconv.Itoa(i)+".content") != nil {
			return false
		}
		w.bound(0)
	}
	return true
}

func (w *prefixWriter) responses(top map[string]json.RawMessage) bool {
	w.openAIKey(top)
	var prev string
	if json.Unmarshal(top["previous_response_id"], &prev) == nil && prev != "" {
		w.part("previous_response", []byte(prev))
	}
	if !w.openAITools(top, true) {
		return false
	}
	if raw, ok := top["instructions"]; ok && !isNull(raw) {
		w.part("instructions", canonical(raw))
		if w.est.responseInput(raw, "instructions") != nil {
			return false
		}
	}
	var items []json.RawMessage
	if json.Unmarshal(top["input"], &items) != nil {
		return true // a string input is the new turn: the prefix is what came before it
	}
	for i, it := range items[:max(0, len(items)-1)] {
		w.part("item", canonical(it))
		if w.est.responseItem(it, "input["+strconv.Itoa(i)+"]") != nil {
			return false
		}
		w.bound(0)
	}
	return true
}

// SessionOf returns the session marker a request body carries for cache
// affinity: Anthropic's metadata.user_id; OpenAI's prompt_cache_key, else
// its user. "" when it has none or the body cannot be read.
func SessionOf(p llm.Protocol, body []byte) string {
	var b struct {
		Metadata *struct {
			UserID string `json:"user_id"`
		} `json:"metadata"`
		PromptCacheKey string `json:"prompt_cache_key"`
		User           string `json:"user"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	if p == llm.Anthropic {
		if b.Metadata != nil {
			return b.Metadata.UserID
		}
		return ""
	}
	if b.PromptCacheKey != "" {
		return b.PromptCacheKey
	}
	return b.User
}
