package mock

import (
	"encoding/json"
	"fmt"
	"time"
)

// Anthropic Messages and count_tokens bodies: tools, then system, then
// messages, each tool, system block and content block one prompt block
// (a string system or content one block), cache_control breakpoints on
// blocks, and the automatic-caching top-level cache_control that puts one
// on the last block.

// anthropicBlock is the part of a content block the mock reads.
type anthropicBlock struct {
	Type         *string         `json:"type"`
	Text         *string         `json:"text"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// cacheControlTTL reads a cache_control value: {"type":"ephemeral"} with an
// optional "ttl" of "5m" (the default) or "1h".
func cacheControlTTL(field string, raw json.RawMessage) (time.Duration, *apiError) {
	var cc struct {
		Type *string `json:"type"`
		TTL  *string `json:"ttl"`
	}
	if err := json.Unmarshal(raw, &cc); err != nil {
		return 0, invalid("%s: Input should be a valid dictionary", field)
	}
	if cc.Type == nil || *cc.Type != "ephemeral" {
		return 0, invalid("%s.type: Input should be 'ephemeral'", field)
	}
	if cc.TTL == nil {
		return cacheTTL5m, nil
	}
	switch *cc.TTL {
	case "5m":
		return cacheTTL5m, nil
	case "1h":
		return cacheTTL1h, nil
	}
	return 0, invalid("%s.ttl: Input should be '5m' or '1h'", field)
}

// anthropicPrompt builds a prompt block by block.
type anthropicPrompt struct{ p *prompt }

// markIf puts the breakpoint of a block's cache_control, if it has one.
func (a anthropicPrompt) markIf(field string, raw json.RawMessage) *apiError {
	if !present(raw) {
		return nil
	}
	ttl, aerr := cacheControlTTL(field+".cache_control", raw)
	if aerr != nil {
		return aerr
	}
	a.p.mark(ttl)
	return nil
}

// content adds a string-or-blocks value (system, message content).
func (a anthropicPrompt) content(field string, raw json.RawMessage) *apiError {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		a.p.add(s)
		return nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return invalid("%s: Input should be a valid string or a list of content blocks", field)
	}
	for i, rb := range blocks {
		path := fmt.Sprintf("%s.%d", field, i)
		var b anthropicBlock
		if err := json.Unmarshal(rb, &b); err != nil || b.Type == nil {
			return invalid("%s.type: Field required", path)
		}
		if *b.Type == "text" {
			if b.Text == nil {
				return invalid("%s.text: Field required", path)
			}
			a.p.add(*b.Text)
		} else {
			a.p.add(withoutCacheControl(rb))
		}
		if aerr := a.markIf(path, b.CacheControl); aerr != nil {
			return aerr
		}
	}
	return nil
}

// checkBreakpoints enforces at most four breakpoints, 1-hour ones before
// 5-minute ones.
func checkBreakpoints(p *prompt) *apiError {
	bps := p.breakpoints()
	if len(bps) > maxAnthropicBreakpoints {
		return invalid("A maximum of %d blocks with cache_control may be provided. Found %d.", maxAnthropicBreakpoints, len(bps))
	}
	seen5m := false
	for _, b := range bps {
		switch ttl := p.blocks[b].ttl; {
		case ttl < cacheTTL1h:
			seen5m = true
		case seen5m:
			return invalid("cache_control: a block with ttl '1h' must not come after a block with ttl '5m'")
		}
	}
	return nil
}

// parseAnthropic parses a Messages (or count_tokens, needMax false) body.
func parseAnthropic(body []byte, needMax bool) (request, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return request{}, invalid("invalid request body: %v", err)
	}
	r := request{n: 1, bodyHash: bodyHash(body)}
	if !present(top["model"]) {
		return request{}, invalid("model: Field required")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return request{}, invalid("model: Input should be a non-empty string")
	}
	if needMax {
		if !present(top["max_tokens"]) {
			return request{}, invalid("max_tokens: Field required")
		}
		if err := json.Unmarshal(top["max_tokens"], &r.maxTokens); err != nil || r.maxTokens < 1 {
			return request{}, invalid("max_tokens: Input should be an integer greater than or equal to 1")
		}
	}
	if present(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &r.stream); err != nil {
			return request{}, invalid("stream: Input should be a valid boolean")
		}
	}
	if present(top["service_tier"]) {
		if json.Unmarshal(top["service_tier"], &r.tier) != nil || (r.tier != "auto" && r.tier != "standard_only") {
			return request{}, invalid("service_tier: Input should be 'auto' or 'standard_only'")
		}
	}
	if !present(top["messages"]) {
		return request{}, invalid("messages: Field required")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return request{}, invalid("messages: Input should be a valid list of message objects")
	}
	if len(msgs) == 0 {
		return request{}, invalid("messages: at least one message is required")
	}
	a := anthropicPrompt{p: &prompt{model: r.model}}
	if present(top["tools"]) {
		var tools []json.RawMessage
		if err := json.Unmarshal(top["tools"], &tools); err != nil {
			return request{}, invalid("tools: Input should be a valid list")
		}
		for i, t := range tools {
			a.p.add(withoutCacheControl(t))
			var tc struct {
				CacheControl json.RawMessage `json:"cache_control"`
			}
			if json.Unmarshal(t, &tc) == nil {
				if aerr := a.markIf(fmt.Sprintf("tools.%d", i), tc.CacheControl); aerr != nil {
					return request{}, aerr
				}
			}
		}
	}
	if present(top["system"]) {
		if aerr := a.content("system", top["system"]); aerr != nil {
			return request{}, aerr
		}
	}
	for i, m := range msgs {
		var role string
		if m == nil || json.Unmarshal(m["role"], &role) != nil || (role != "user" && role != "assistant") {
			return request{}, invalid("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if !present(m["content"]) {
			return request{}, invalid("messages.%d.content: Field required", i)
		}
		if aerr := a.content(fmt.Sprintf("messages.%d.content", i), m["content"]); aerr != nil {
			return request{}, aerr
		}
	}
	if present(top["cache_control"]) {
		// Automatic caching: the breakpoint goes on the last block.
		ttl, aerr := cacheControlTTL("cache_control", top["cache_control"])
		if aerr != nil {
			return request{}, aerr
		}
		if n := len(a.p.blocks); n > 0 && a.p.blocks[n-1].ttl == 0 {
			a.p.blocks[n-1].ttl = ttl
		}
	}
	if aerr := checkBreakpoints(a.p); aerr != nil {
		return request{}, aerr
	}
	r.prompt = a.p
	r.inputTokens = a.p.tokens()
	return r, nil
}
