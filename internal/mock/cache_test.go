package mock

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blk is a text block of n tokens (4n bytes of c) with an optional
// cache_control TTL ("5m", "1h", or "ephemeral" for one without a ttl).
type blk struct {
	c   byte
	n   int
	ttl string
}

func (b blk) json() map[string]any {
	m := map[string]any{"type": "text", "text": strings.Repeat(string(b.c), 4*b.n)}
	switch b.ttl {
	case "":
	case "ephemeral":
		m["cache_control"] = map[string]any{"type": "ephemeral"}
	default:
		m["cache_control"] = map[string]any{"type": "ephemeral", "ttl": b.ttl}
	}
	return m
}

// anthropicCacheBody is a Messages body: system blocks, then one message
// per turn (user, assistant, user, …) with the given blocks.
func anthropicCacheBody(t *testing.T, model string, system []blk, turns ...[]blk) string {
	t.Helper()
	body := map[string]any{"model": model, "max_tokens": 4}
	var sys []any
	for _, b := range system {
		sys = append(sys, b.json())
	}
	if sys != nil {
		body["system"] = sys
	}
	var msgs []any
	for i, turn := range turns {
		var content []any
		for _, b := range turn {
			content = append(content, b.json())
		}
		msgs = append(msgs, map[string]any{"role": []string{"user", "assistant"}[i%2], "content": content})
	}
	body["messages"] = msgs
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return string(b)
}

// cacheUsage is the part of an Anthropic usage the cache tests check.
type cacheUsage struct {
	Input, Create, Read, W5m, W1h int64
}

func anthropicCacheUsage(t *testing.T, s *Server, key, body string) cacheUsage {
	t.Helper()
	w := anth(s, key, body)
	require.Equal(t, 200, w.Code, w.Body.String())
	var m struct {
		Usage struct {
			Input         int64 `json:"input_tokens"`
			Create        int64 `json:"cache_creation_input_tokens"`
			Read          int64 `json:"cache_read_input_tokens"`
			CacheCreation struct {
				W5m int64 `json:"ephemeral_5m_input_tokens"`
				W1h int64 `json:"ephemeral_1h_input_tokens"`
			} `json:"cache_creation"`
			Tier string `json:"service_tier"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	require.Equal(t, "standard", m.Usage.Tier)
	u := m.Usage
	return cacheUsage{u.Input, u.Create, u.Read, u.CacheCreation.W5m, u.CacheCreation.W1h}
}

// TestAnthropicCacheRules walks request sequences through one key's cache
// on the fake clock and checks every usage split: writes up to the last
// breakpoint at or above the model's minimum, reads of the longest cached
// prefix within 20 blocks before a breakpoint, input_tokens the rest,
// 1h/5m split, TTL expiry and refresh, per key and per model.
func TestAnthropicCacheRules(t *testing.T) {
	t.Parallel()
	const sonnet, haiku45, opus5 = "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-5"
	type step struct {
		after time.Duration // clock advance before the request
		key   string        // "" = "k"
		body  func(t *testing.T) string
		want  cacheUsage
	}
	sysQ := func(model string, n int, ttl string, q int) func(t *testing.T) string {
		return func(t *testing.T) string {
			return anthropicCacheBody(t, model, []blk{{'s', n, ttl}}, []blk{{'q', q, ""}})
		}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"write then read", []step{
			{body: sysQ(sonnet, 1100, "ephemeral", 100), want: cacheUsage{100, 1100, 0, 1100, 0}},
			{body: sysQ(sonnet, 1100, "ephemeral", 100), want: cacheUsage{100, 0, 1100, 0, 0}},
			{body: sysQ(sonnet, 1100, "ephemeral", 7), want: cacheUsage{7, 0, 1100, 0, 0}},
		}},
		{"below the model's minimum nothing is cached", []step{
			{body: sysQ(sonnet, 1000, "5m", 100), want: cacheUsage{1100, 0, 0, 0, 0}},
			{body: sysQ(sonnet, 1000, "5m", 100), want: cacheUsage{1100, 0, 0, 0, 0}},
		}},
		{"haiku 4.5 needs 4096 tokens", []step{
			{body: sysQ(haiku45, 4000, "5m", 10), want: cacheUsage{4010, 0, 0, 0, 0}},
			{body: sysQ(haiku45, 4100, "5m", 10), want: cacheUsage{10, 4100, 0, 4100, 0}},
		}},
		{"opus 5 needs 512 tokens", []step{
			{body: sysQ(opus5, 600, "5m", 10), want: cacheUsage{10, 600, 0, 600, 0}},
			{body: sysQ(opus5, 600, "5m", 10), want: cacheUsage{10, 0, 600, 0, 0}},
		}},
		{"another key misses", []step{
			{body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 1100, 0, 1100, 0}},
			{key: "other", body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 1100, 0, 1100, 0}},
			{body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 0, 1100, 0, 0}},
		}},
		{"another model misses", []step{
			{body: sysQ(sonnet, 4100, "5m", 1), want: cacheUsage{1, 4100, 0, 4100, 0}},
			{body: sysQ("claude-opus-4-8", 4100, "5m", 1), want: cacheUsage{1, 4100, 0, 4100, 0}},
		}},
		{"5m expires after five minutes without use", []step{
			{body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 1100, 0, 1100, 0}},
			{after: 5 * time.Minute, body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 1100, 0, 1100, 0}},
		}},
		{"a hit refreshes the TTL", []step{
			{body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 1100, 0, 1100, 0}},
			{after: 4 * time.Minute, body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 0, 1100, 0, 0}},
			{after: 4 * time.Minute, body: sysQ(sonnet, 1100, "5m", 1), want: cacheUsage{1, 0, 1100, 0, 0}},
		}},
		{"1h outlives 5 minutes, not an hour", []step{
			{body: sysQ(sonnet, 1100, "1h", 1), want: cacheUsage{1, 1100, 0, 0, 1100}},
			{after: 30 * time.Minute, body: sysQ(sonnet, 1100, "1h", 1), want: cacheUsage{1, 0, 1100, 0, 0}},
			{after: time.Hour, body: sysQ(sonnet, 1100, "1h", 1), want: cacheUsage{1, 1100, 0, 0, 1100}},
		}},
		{"1h then 5m breakpoints split the write", []step{
			{body: func(t *testing.T) string {
				return anthropicCacheBody(t, sonnet, []blk{{'s', 2000, "1h"}}, []blk{{'a', 1000, "5m"}, {'q', 3, ""}})
			}, want: cacheUsage{3, 3000, 0, 1000, 2000}},
			{body: func(t *testing.T) string {
				return anthropicCacheBody(t, sonnet, []blk{{'s', 2000, "1h"}}, []blk{{'a', 1000, "5m"}, {'q', 3, ""}})
			}, want: cacheUsage{3, 0, 3000, 0, 0}},
			{after: 10 * time.Minute, body: func(t *testing.T) string { // the 5m entry expired, the 1h one lives
				return anthropicCacheBody(t, sonnet, []blk{{'s', 2000, "1h"}}, []blk{{'a', 1000, "5m"}, {'q', 3, ""}})
			}, want: cacheUsage{3, 1000, 2000, 1000, 0}},
		}},
		{"a growing conversation reads the previous turn", []step{
			{body: func(t *testing.T) string {
				return anthropicCacheBody(t, sonnet, []blk{{'s', 1024, ""}}, []blk{{'u', 50, "5m"}})
			}, want: cacheUsage{0, 1074, 0, 1074, 0}},
			{body: func(t *testing.T) string {
				return anthropicCacheBody(t, sonnet, []blk{{'s', 1024, ""}}, []blk{{'u', 50, ""}}, []blk{{'a', 30, ""}}, []blk{{'v', 20, "5m"}})
			}, want: cacheUsage{0, 50, 1074, 50, 0}},
		}},
		{"a hit more than 20 blocks back is not found", []step{
			{body: func(t *testing.T) string {
				return anthropicCacheBody(t, sonnet, []blk{{'s', 1100, "5m"}}, []blk{{'u', 1, ""}})
			}, want: cacheUsage{1, 1100, 0, 1100, 0}},
			{body: func(t *testing.T) string {
				turn := make([]blk, 21)
				for i := range turn {
					turn[i] = blk{byte('a' + i), 1, ""}
				}
				turn[20].ttl = "5m"
				return anthropicCacheBody(t, sonnet, []blk{{'s', 1100, ""}}, turn)
			}, want: cacheUsage{0, 1121, 0, 1121, 0}},
		}},
		{"automatic caching marks the last block", []step{
			{body: func(t *testing.T) string {
				b := anthropicCacheBody(t, sonnet, []blk{{'s', 1100, ""}}, []blk{{'q', 5, ""}})
				return strings.Replace(b, `{"max_tokens"`, `{"cache_control":{"type":"ephemeral"},"max_tokens"`, 1)
			}, want: cacheUsage{0, 1105, 0, 1105, 0}},
			{body: sysQ(sonnet, 1100, "", 5), want: cacheUsage{1105, 0, 0, 0, 0}}, // no breakpoint: no lookup
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, fc := newMock(t, Config{OutputTokens: OutputRange{Min: 1, Max: 1}})
			for i, st := range tc.steps {
				fc.Advance(st.after)
				key := st.key
				if key == "" {
					key = "k"
				}
				require.Equal(t, st.want, anthropicCacheUsage(t, s, key, st.body(t)), "step %d", i)
			}
		})
	}
}

func TestAnthropicCacheValidation(t *testing.T) {
	t.Parallel()
	five := make([]blk, 5)
	for i := range five {
		five[i] = blk{'x', 1, "5m"}
	}
	tests := []struct {
		name, body, want string
	}{
		{"five breakpoints", anthropicCacheBody(t, "m", nil, five), "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"1h after 5m", anthropicCacheBody(t, "m", []blk{{'s', 1, "5m"}}, []blk{{'q', 1, "1h"}}), "cache_control: a block with ttl '1h' must not come after a block with ttl '5m'"},
		{"bad ttl", anthropicCacheBody(t, "m", []blk{{'s', 1, "2h"}}, []blk{{'q', 1, ""}}), "system.0.cache_control.ttl: Input should be '5m' or '1h'"},
		{"bad type", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"forever"}}]}]}`,
			"messages.0.content.0.cache_control.type: Input should be 'ephemeral'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{})
			w := anth(s, "k", tc.body)
			require.Equal(t, 400, w.Code)
			require.Equal(t, tc.want, decode(t, w.Body.Bytes())["error"].(map[string]any)["message"])
		})
	}
}

// TestITPMCountsCacheReadsOnlyForDaggerModels: ITPM is charged input_tokens
// + cache_creation_input_tokens, and cache reads only for the models the
// rate-limit tables mark † (Claude Haiku 3.5, Haiku 3).
func TestITPMCountsCacheReadsOnlyForDaggerModels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model       string
		secondInput int64 // ITPM charge of the second (cache-reading) request
	}{
		{"claude-sonnet-4-5", 100},
		{"claude-opus-4-8", 100},
		{"claude-haiku-4-5", 100},
		{"claude-3-5-haiku-20241022", 100 + 2100},
		{"claude-3-haiku-20240307", 100 + 2100},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Limits: Limits{ITPM: 600_000}, OutputTokens: OutputRange{Min: 1, Max: 1}})
			n := 2100
			if strings.Contains(tc.model, "haiku-4-5") {
				n = 4100
				tc.secondInput = 100
			}
			body := anthropicCacheBody(t, tc.model, []blk{{'s', n, "5m"}}, []blk{{'q', 100, ""}})
			first := anthropicCacheUsage(t, s, "k", body)
			require.Equal(t, int64(n), first.Create)
			before := s.Stats().Keys["k"].Admitted.InputTokens
			require.Equal(t, int64(n+100), before, "writes are charged")
			second := anthropicCacheUsage(t, s, "k", body)
			require.Equal(t, int64(n), second.Read)
			require.Equal(t, tc.secondInput, s.Stats().Keys["k"].Admitted.InputTokens-before)
			c := s.Stats().Keys["k"].Cache
			require.Equal(t, CacheCounts{PromptTokens: 2 * int64(n+100), ReadTokens: int64(n), WriteTokens: int64(n),
				Write5mTokens: int64(n), Hits: 1}, c)
		})
	}
}

func TestRefusedRequestsNeitherReadNorWrite(t *testing.T) {
	t.Parallel()
	s, fc := newMock(t, Config{Limits: Limits{RPM: 60}, BurstSeconds: 1, OutputTokens: OutputRange{Min: 1, Max: 1}})
	body := anthropicCacheBody(t, "claude-sonnet-4-5", []blk{{'s', 1100, "5m"}}, []blk{{'q', 1, ""}})
	require.Equal(t, 200, anth(s, "other", body).Code) // another key's cache
	w := anth(s, "k", body)
	require.Equal(t, 200, w.Code)
	require.Equal(t, 429, anth(s, "k", anthropicCacheBody(t, "claude-sonnet-4-5", []blk{{'t', 1100, "5m"}}, []blk{{'q', 1, ""}})).Code)
	fc.Advance(time.Second)
	u := anthropicCacheUsage(t, s, "k", anthropicCacheBody(t, "claude-sonnet-4-5", []blk{{'t', 1100, "5m"}}, []blk{{'q', 1, ""}}))
	require.Equal(t, int64(1100), u.Create, "the refused request wrote nothing")
	// count_tokens neither reads nor writes: it reports the total.
	w = call(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": "k"}, body)
	require.Equal(t, 200, w.Code)
	require.Equal(t, 1101.0, decode(t, w.Body.Bytes())["input_tokens"])
}

// openAIChatBody is a chat body whose system message is n tokens of c and
// whose user message is q tokens.
func openAIChatBody(model string, c byte, n, q int, extra string) string {
	return `{"model":"` + model + `","max_tokens":4` + extra + `,"messages":[{"role":"system","content":"` +
		strings.Repeat(string(c), 4*n) + `"},{"role":"user","content":"` + strings.Repeat("q", 4*q) + `"}]}`
}

func openAICached(t *testing.T, s *Server, key, body string) (prompt, cached int64) {
	t.Helper()
	w := oai(s, key, body)
	require.Equal(t, 200, w.Code, w.Body.String())
	var m struct {
		Usage struct {
			Prompt  int64 `json:"prompt_tokens"`
			Details struct {
				Cached int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
	return m.Usage.Prompt, m.Usage.Details.Cached
}

// TestOpenAIPrefixCaching: prompts of 1024 tokens or more are cached
// automatically, hits in 128-token increments of the longest shared
// prefix, per key, per model and per prompt_cache_key, for five minutes
// after the last use (24 hours with prompt_cache_retention "24h").
func TestOpenAIPrefixCaching(t *testing.T) {
	t.Parallel()
	type step struct {
		after      time.Duration
		key        string
		body       string
		wantCached int64
	}
	const m = "gpt-4o-mini"
	tests := []struct {
		name  string
		steps []step
	}{
		{"below 1024 tokens nothing is cached", []step{
			{body: openAIChatBody(m, 's', 1000, 10, ""), wantCached: 0},
			{body: openAIChatBody(m, 's', 1000, 10, ""), wantCached: 0},
		}},
		{"1024 and every 128 after", []step{
			{body: openAIChatBody(m, 's', 2000, 10, ""), wantCached: 0},
			{body: openAIChatBody(m, 's', 2000, 10, ""), wantCached: 1920},          // 2010 → 1024 + 7×128
			{body: openAIChatBody(m, 's', 2000, 500, ""), wantCached: 1920 + 128*0}, // same first 2010 tokens, q differs after 2000
			{body: openAIChatBody(m, 's', 1100, 10, ""), wantCached: 1024},          // shares 1100 tokens of s
		}},
		{"another key misses", []step{
			{body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 0},
			{key: "other", body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 0},
			{body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 1024},
		}},
		{"another model misses", []step{
			{body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 0},
			{body: openAIChatBody("gpt-4.1", 's', 1100, 1, ""), wantCached: 0},
		}},
		{"prompt_cache_key partitions the cache", []step{
			{body: openAIChatBody(m, 's', 1100, 1, `,"prompt_cache_key":"a"`), wantCached: 0},
			{body: openAIChatBody(m, 's', 1100, 1, `,"prompt_cache_key":"b"`), wantCached: 0},
			{body: openAIChatBody(m, 's', 1100, 1, `,"prompt_cache_key":"a"`), wantCached: 1024},
		}},
		{"in-memory retention expires after five idle minutes", []step{
			{body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 0},
			{after: 4 * time.Minute, body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 1024},
			{after: 4 * time.Minute, body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 1024},
			{after: 5 * time.Minute, body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 0},
		}},
		{"24h retention", []step{
			{body: openAIChatBody(m, 's', 1100, 1, `,"prompt_cache_retention":"24h"`), wantCached: 0},
			{after: 3 * time.Hour, body: openAIChatBody(m, 's', 1100, 1, ""), wantCached: 1024},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, fc := newMock(t, Config{OutputTokens: OutputRange{Min: 1, Max: 1}})
			for i, st := range tc.steps {
				fc.Advance(st.after)
				key := st.key
				if key == "" {
					key = "k"
				}
				_, cached := openAICached(t, s, key, st.body)
				require.Equal(t, st.wantCached, cached, "step %d", i)
			}
		})
	}
}

// TestOpenAITPMCountsCachedTokens: OpenAI's TPM counts every input token,
// cached or not ("Do cached prompts contribute to TPM rate limits? Yes, as
// caching does not affect rate limits").
func TestOpenAITPMCountsCachedTokens(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{TPM: 1_000_000}, OutputTokens: OutputRange{Min: 4, Max: 4}})
	body := openAIChatBody("gpt-4o-mini", 's', 3000, 0, "")
	remaining := func() int64 {
		w := oai(s, "k", body)
		require.Equal(t, 200, w.Code)
		r, err := strconv.ParseInt(w.Header().Get("x-ratelimit-remaining-tokens"), 10, 64)
		require.NoError(t, err)
		return r
	}
	r1 := remaining() // 3000 input + 4 reserved (and used)
	r2 := remaining() // the same, 2944 of it cached
	require.Equal(t, int64(1_000_000-3004), r1)
	require.Equal(t, int64(3004), r1-r2, "the cached request took as much TPM")
	prompt, cached := openAICached(t, s, "k", body)
	require.Equal(t, int64(3000), prompt)
	require.Equal(t, int64(2944), cached)
	st := s.Stats().Keys["k"]
	require.Equal(t, int64(3*3000), st.Admitted.InputTokens, "all input counted")
	require.Equal(t, int64(2*2944), st.Cache.ReadTokens)
}
