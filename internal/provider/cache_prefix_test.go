package provider_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func prefixOf(t *testing.T, p llm.Protocol, e provider.Endpoint, body string) (provider.CachePrefix, bool) {
	t.Helper()
	return provider.CachePrefixOf(p, e, []byte(body), nil)
}

// longSystem is an Anthropic system block of n tokens (4n bytes).
func longSystem(n int, cc string) string {
	b := `{"type":"text","text":"` + strings.Repeat("s", 4*n) + `"`
	if cc != "" {
		b += `,"cache_control":` + cc
	}
	return b + "}"
}

func TestCachePrefixAnthropic(t *testing.T) {
	t.Parallel()
	eph := `{"type":"ephemeral"}`
	body := func(model, system, messages string, extra string) string {
		return `{"model":"` + model + `","max_tokens":8` + extra + `,"system":[` + system + `],"messages":[` + messages + `]}`
	}
	user := func(text, cc string) string {
		b := `{"role":"user","content":[{"type":"text","text":"` + text + `"`
		if cc != "" {
			b += `,"cache_control":` + cc
		}
		return b + `}]}`
	}
	turn1 := body("claude-sonnet-4-5", longSystem(1100, eph), user("first question", ""), "")
	p1, ok := prefixOf(t, llm.Anthropic, provider.EndpointChat, turn1)
	require.True(t, ok)
	require.Len(t, p1.Hash, 32)
	require.Equal(t, int64(1100), p1.Tokens, "the system block only: up to the breakpoint")
	require.True(t, p1.Cacheable)
	require.Equal(t, provider.CacheTTL5m, p1.TTL)

	// The same prefix with a 1h TTL, or another question after it: the same
	// hash (markers are not content).
	p2, _ := prefixOf(t, llm.Anthropic, provider.EndpointChat, body("claude-sonnet-4-5", longSystem(1100, `{"type":"ephemeral","ttl":"1h"}`), user("another", ""), ""))
	require.Equal(t, p1.Hash, p2.Hash)
	require.Equal(t, provider.CacheTTL1h, p2.TTL)

	// The conversation grows and the breakpoint moves: a longer prefix, a
	// new hash, the same route.
	grown := body("claude-sonnet-4-5", longSystem(1100, ""), user("first question", "")+`,{"role":"assistant","content":"an answer"},`+user("second", eph), "")
	p3, _ := prefixOf(t, llm.Anthropic, provider.EndpointChat, grown)
	require.NotEqual(t, p1.Hash, p3.Hash)
	require.Equal(t, p1.Route, p3.Route)
	require.Equal(t, int64(1100+3*provider.MessageOverheadTokens+4+3+2), p3.Tokens)

	// Another model: another cache.
	p4, _ := prefixOf(t, llm.Anthropic, provider.EndpointChat, body("claude-haiku-4-5", longSystem(1100, eph), user("first question", ""), ""))
	require.NotEqual(t, p1.Hash, p4.Hash)
	require.NotEqual(t, p1.Route, p4.Route)
	require.False(t, p4.Cacheable, "Haiku 4.5 caches from 4096 tokens")

	// No breakpoint: nothing to cache; a top-level cache_control: all of it.
	_, ok = prefixOf(t, llm.Anthropic, provider.EndpointChat, body("claude-sonnet-4-5", longSystem(1100, ""), user("q", ""), ""))
	require.False(t, ok)
	auto, ok := prefixOf(t, llm.Anthropic, provider.EndpointChat, body("claude-sonnet-4-5", longSystem(1100, ""), user("abcd", ""), `,"cache_control":{"type":"ephemeral","ttl":"1h"}`))
	require.True(t, ok)
	require.Equal(t, int64(1100+provider.MessageOverheadTokens+1), auto.Tokens)
	require.Equal(t, provider.CacheTTL1h, auto.TTL)

	// count_tokens bodies have the same prefix as the messages they count.
	ct, _ := prefixOf(t, llm.Anthropic, provider.EndpointCountTokens, turn1)
	require.Equal(t, p1, ct)

	// Tools come first and carry the tool-use system prompt.
	tools := `{"model":"claude-sonnet-4-5","max_tokens":8,"tools":[{"name":"abcd","description":"abcdefgh","input_schema":{"a":1},"cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"x"}]}`
	pt, ok := prefixOf(t, llm.Anthropic, provider.EndpointChat, tools)
	require.True(t, ok)
	require.Equal(t, int64(provider.ToolUseSystemTokens+1+2+2), pt.Tokens)
	require.False(t, pt.Cacheable)
}

func TestCachePrefixOpenAI(t *testing.T) {
	t.Parallel()
	sys := strings.Repeat("s", 4*1100)
	chat := func(extra, last string) string {
		return `{"model":"gpt-4.1"` + extra + `,"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"` + last + `"}]}`
	}
	c1, ok := prefixOf(t, llm.OpenAI, provider.EndpointChat, chat("", "one"))
	require.True(t, ok)
	require.Equal(t, int64(provider.MessageOverheadTokens+1100), c1.Tokens, "every message but the last")
	require.True(t, c1.Cacheable)
	require.Zero(t, c1.TTL)
	c2, _ := prefixOf(t, llm.OpenAI, provider.EndpointChat, chat("", "two"))
	require.Equal(t, c1.Hash, c2.Hash, "the new turn is not in the prefix")
	c3, _ := prefixOf(t, llm.OpenAI, provider.EndpointChat, chat(`,"prompt_cache_key":"tenant-7"`, "one"))
	require.NotEqual(t, c1.Hash, c3.Hash, "prompt_cache_key partitions the cache")
	require.NotEqual(t, c1.Route, c3.Route)
	_, ok = prefixOf(t, llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","messages":[{"role":"user","content":"only"}]}`)
	require.False(t, ok, "nothing before the last message")
	short, _ := prefixOf(t, llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"x"}]}`)
	require.False(t, short.Cacheable, "below 1024 tokens")

	// Responses: tools, instructions and the items before the last.
	r1, ok := prefixOf(t, llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","instructions":"`+sys+`","input":"one"}`)
	require.True(t, ok)
	require.Equal(t, int64(provider.MessageOverheadTokens+1100), r1.Tokens)
	require.True(t, r1.Cacheable)
	r2, _ := prefixOf(t, llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","instructions":"`+sys+`","input":[{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three"}]}`)
	require.Equal(t, r1.Route, r2.Route)
	require.Equal(t, int64(provider.MessageOverheadTokens+1100+2*(provider.MessageOverheadTokens+1)), r2.Tokens)
	prev, ok := prefixOf(t, llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","previous_response_id":"resp_1","input":"next"}`)
	require.True(t, ok, "the previous turn is a prefix the body does not show")
	require.Zero(t, prev.Tokens)
	other, _ := prefixOf(t, llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","previous_response_id":"resp_2","input":"next"}`)
	require.NotEqual(t, prev.Hash, other.Hash)

	_, ok = prefixOf(t, llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":"x"}`)
	require.False(t, ok)
}

// FuzzCachePrefixOf: never panics, and the same body always gives the same
// prefix.
func FuzzCachePrefixOf(f *testing.F) {
	for _, s := range []string{
		`{"model":"claude-sonnet-4-5","max_tokens":8,"system":[` + longSystem(10, `{"type":"ephemeral"}`) + `],"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":[{"type":"image","source":{}}]}],"tools":[{"name":"t","cache_control":{}}]}`,
		`{"model":"gpt-4.1","prompt_cache_key":"k","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"y"}]}`,
		`{"model":"gpt-4.1","instructions":"i","previous_response_id":"r","input":[{"type":"function_call_output","output":[1]},{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":5}]}`, `{"model":1}`, `[]`,
	} {
		for e := range 4 {
			f.Add(s, uint8(e), true)
			f.Add(s, uint8(e), false)
		}
	}
	f.Fuzz(func(t *testing.T, body string, e uint8, anthropic bool) {
		p := llm.OpenAI
		if anthropic {
			p = llm.Anthropic
		}
		ep := provider.Endpoint(e % 4)
		_ = provider.SessionOf(p, []byte(body))
		c, ok := provider.CachePrefixOf(p, ep, []byte(body), nil)
		again, ok2 := provider.CachePrefixOf(p, ep, []byte(body), nil)
		require.Equal(t, ok, ok2)
		require.Equal(t, c, again)
		if !ok {
			require.Equal(t, provider.CachePrefix{}, c)
			return
		}
		require.Len(t, c.Hash, 32)
		require.Len(t, c.Route, 32)
		require.GreaterOrEqual(t, c.Tokens, int64(0))
		require.Contains(t, []time.Duration{0, provider.CacheTTL5m, provider.CacheTTL1h}, c.TTL)
		for i, b := range c.Blocks {
			require.Len(t, b.Hash, 32)
			if i > 0 {
				require.GreaterOrEqual(t, b.Tokens, c.Blocks[i-1].Tokens, "a longer prefix has no fewer tokens")
			}
		}
		if n := len(c.Blocks); n > 0 && p == llm.Anthropic {
			require.Equal(t, c.Hash, c.Blocks[n-1].Hash)
			require.Equal(t, c.Tokens, c.Blocks[n-1].Tokens)
		}
	})
}

// TestCachePrefixBlocks: each block boundary of the prefix has its own
// hash, so a turn's prefix is found among the next turn's blocks.
func TestCachePrefixBlocks(t *testing.T) {
	t.Parallel()
	eph := `{"type":"ephemeral"}`
	msg := func(role, text, cc string) string {
		b := `{"role":"` + role + `","content":[{"type":"text","text":"` + text + `"`
		if cc != "" {
			b += `,"cache_control":` + cc
		}
		return b + `}]}`
	}
	body := func(msgs ...string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":8,"system":[` + longSystem(1100, eph) + `],"messages":[` + strings.Join(msgs, ",") + `]}`
	}
	turn1, ok := prefixOf(t, llm.Anthropic, provider.EndpointChat, body(msg("user", "q1", eph)))
	require.True(t, ok)
	require.Len(t, turn1.Blocks, 2)
	require.Equal(t, turn1.Hash, turn1.Blocks[1].Hash)
	require.Equal(t, turn1.Tokens, turn1.Blocks[1].Tokens)
	require.Equal(t, int64(1100), turn1.Blocks[0].Tokens)
	require.Equal(t, provider.CacheTTL5m, turn1.Blocks[0].TTL, "the system block is a breakpoint")

	turn2, ok := prefixOf(t, llm.Anthropic, provider.EndpointChat, body(msg("user", "q1", ""), msg("assistant", "a1", ""), msg("user", "q2", eph)))
	require.True(t, ok)
	require.Len(t, turn2.Blocks, 4)
	require.Equal(t, turn1.Blocks[0], turn2.Blocks[0], "the shared system prompt")
	require.Equal(t, turn1.Hash, turn2.Blocks[1].Hash, "the previous turn's prefix, without its marker")
	require.Zero(t, turn2.Blocks[1].TTL)
	require.Equal(t, turn2.Hash, turn2.Blocks[3].Hash)

	oa, ok := prefixOf(t, llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4o","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"user","content":"last"}]}`)
	require.True(t, ok)
	require.Len(t, oa.Blocks, 2)
	require.Equal(t, oa.Hash, oa.Blocks[1].Hash)
}

func TestSessionOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    llm.Protocol
		body string
		want string
	}{
		{"anthropic user_id", llm.Anthropic, `{"metadata":{"user_id":"u-1"},"user":"x"}`, "u-1"},
		{"anthropic none", llm.Anthropic, `{"user":"x"}`, ""},
		{"openai prompt_cache_key first", llm.OpenAI, `{"prompt_cache_key":"k","user":"x"}`, "k"},
		{"openai user", llm.OpenAI, `{"user":"x"}`, "x"},
		{"broken", llm.OpenAI, `{"user":`, ""},
		{"wrong type", llm.Anthropic, `{"metadata":{"user_id":3}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, provider.SessionOf(tc.p, []byte(tc.body)))
		})
	}
}
