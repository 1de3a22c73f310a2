package mock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseRequests feeds arbitrary bodies to both request parsers: they
// must never panic, and what they accept must be self-consistent.
func FuzzParseRequests(f *testing.F) {
	for _, seed := range []string{
		anthropicBody, openAIBody,
		`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image","source":{}}]}],"tools":[{"name":"get_weather","input_schema":{}}]}`,
		`{"model":"gpt-4o-mini","n":2,"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]}]}`,
		`{"model":`, `null`, `[]`, `{"messages":[null]}`, `{"model":"m","max_tokens":-1,"messages":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if r, err := parseAnthropic(body, true); err == nil {
			require.Positive(t, r.inputTokens)
			require.Positive(t, r.maxTokens)
			require.NotEmpty(t, r.model)
			require.Equal(t, r.prompt.tokens(), r.inputTokens)
			require.LessOrEqual(t, len(r.prompt.breakpoints()), maxAnthropicBreakpoints)
			for _, x := range r.prompt.blockPrefixes() {
				require.LessOrEqual(t, x.tokens(), r.inputTokens)
			}
		} else {
			require.Equal(t, 400, err.status)
			require.Equal(t, "invalid_request_error", err.typ)
		}
		if r, err := parseOpenAI(body, 4096); err == nil {
			require.Positive(t, r.inputTokens)
			require.Positive(t, r.maxTokens)
			require.GreaterOrEqual(t, r.n, 1)
		} else {
			require.Equal(t, 400, err.status)
		}
	})
}
