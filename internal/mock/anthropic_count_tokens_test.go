package mock

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCountTokensMatchesMessages: count_tokens reports exactly the input the
// messages endpoint charges for the same body, cached or not.
func TestCountTokensMatchesMessages(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"plain": anthropicBody,
		"cached system": anthropicCacheBody(t, "claude-sonnet-4-5", []blk{{'s', 1500, "1h"}}, []blk{{'q', 20, "5m"}}, []blk{{'a', 7, ""}},
			[]blk{{'r', 3, ""}}),
		"tools and blocks": `{"model":"claude-sonnet-4-5","max_tokens":4,"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}],` +
			`"system":"be brief","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"what is this?"}]}]}`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{OutputTokens: OutputRange{Min: 1, Max: 1}})
			count := func() int64 {
				w := call(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": "k"}, body)
				require.Equal(t, 200, w.Code, w.Body.String())
				var m map[string]int64
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &m))
				return m["input_tokens"]
			}
			for range 2 { // a write, then a read: the total is the same
				n := count()
				u := anthropicCacheUsage(t, s, "k", body)
				require.Equal(t, n, u.Input+u.Create+u.Read)
			}
			require.Equal(t, int64(4), s.Stats().Keys["k"].ByEndpoint[EndpointCountTokens]+s.Stats().Keys["k"].ByEndpoint[EndpointMessages])
		})
	}
}

// TestCountTokensHasItsOwnBucket: count_tokens and messages have separate
// and independent rate limits, each with its own headers.
func TestCountTokensHasItsOwnBucket(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{RPM: 3, ITPM: 30_000, OTPM: 8_000, CountTokensRPM: 2}})
	count := func() (int, map[string]string) {
		w := call(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": "k"}, anthropicBody)
		h := map[string]string{}
		for _, k := range []string{"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
			"anthropic-ratelimit-input-tokens-limit", "retry-after"} {
			h[k] = w.Header().Get(k)
		}
		if w.Code == 429 {
			h["message"] = decode(t, w.Body.Bytes())["error"].(map[string]any)["message"].(string)
		}
		return w.Code, h
	}
	code, h := count()
	require.Equal(t, 200, code)
	require.Equal(t, map[string]string{"anthropic-ratelimit-requests-limit": "2", "anthropic-ratelimit-requests-remaining": "1",
		"anthropic-ratelimit-input-tokens-limit": "", "retry-after": ""}, h, "its own request bucket, no token buckets")
	code, _ = count()
	require.Equal(t, 200, code)
	code, h = count()
	require.Equal(t, 429, code)
	require.Equal(t, "30", h["retry-after"], "one request at 2 per minute")
	require.Contains(t, h["message"], "of 2 requests per minute")

	// Messages were untouched, and draining them leaves count_tokens alone.
	for i := range 3 {
		w := anth(s, "k", anthropicBody)
		require.Equal(t, 200, w.Code)
		require.Equal(t, "3", w.Header().Get("anthropic-ratelimit-requests-limit"))
		require.Equal(t, []string{"2", "1", "0"}[i], w.Header().Get("anthropic-ratelimit-requests-remaining"))
	}
	require.Equal(t, 429, anth(s, "k", anthropicBody).Code)
	other := call(s, "POST", "/v1/messages/count_tokens", map[string]string{"x-api-key": "other"}, anthropicBody)
	require.Equal(t, 200, other.Code, "another key has its own count_tokens bucket")
	st := s.Stats().Keys["k"]
	require.Equal(t, int64(3), st.Admitted.Requests, "count_tokens is not a model admission")
	require.Equal(t, map[string]int64{EndpointCountTokens: 2, EndpointMessages: 3}, st.ByEndpoint)
}
