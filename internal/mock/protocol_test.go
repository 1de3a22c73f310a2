package mock

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var reqIDRe = regexp.MustCompile(`^req_01[0-9A-Za-z]{22}$`)

func TestProtocolAnswers(t *testing.T) {
	t.Parallel()
	big := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`
	tests := []struct {
		name    string
		method  string
		path    string
		hdr     map[string]string
		body    string
		status  int
		ctype   string
		want    string // exact JSON, request_id blanked; "" = not checked
		openAI  bool
		rlHeads bool // rate-limit headers expected
	}{
		{name: "anthropic missing key", method: "POST", path: "/v1/messages", body: anthropicBody, status: 401,
			ctype: "application/json", want: `{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"},"request_id":""}`},
		{name: "anthropic bad json", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"}, body: `{"model":`,
			status: 400, ctype: "application/json", rlHeads: true},
		{name: "anthropic missing max_tokens", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"},
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, status: 400, ctype: "application/json", rlHeads: true,
			want: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":""}`},
		{name: "anthropic missing model", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"},
			body: `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, ctype: "application/json", rlHeads: true,
			want: `{"type":"error","error":{"type":"invalid_request_error","message":"model: Field required"},"request_id":""}`},
		{name: "anthropic empty messages", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"},
			body: `{"model":"m","max_tokens":5,"messages":[]}`, status: 400, ctype: "application/json", rlHeads: true},
		{name: "anthropic too large", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"}, body: big,
			status: 413, ctype: "application/json",
			want: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."},"request_id":""}`},
		{name: "anthropic unknown path", method: "POST", path: "/v1/nope", hdr: map[string]string{"x-api-key": "k"}, status: 404,
			ctype: "application/json", want: `{"type":"error","error":{"type":"not_found_error","message":"The requested resource could not be found."},"request_id":""}`},
		{name: "count tokens", method: "POST", path: "/v1/messages/count_tokens", hdr: map[string]string{"x-api-key": "k"},
			body: `{"model":"m","messages":[{"role":"user","content":"abcdefgh"}]}`, status: 200, ctype: "application/json",
			want: `{"input_tokens":2}`, rlHeads: true},
		{name: "anthropic ok", method: "POST", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k"}, body: anthropicBody,
			status: 200, ctype: "application/json", rlHeads: true},
		{name: "openai missing key", method: "POST", path: "/v1/chat/completions", body: openAIBody, status: 401, openAI: true,
			ctype: "application/json", want: `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "openai missing messages", method: "POST", path: "/v1/chat/completions", hdr: map[string]string{"Authorization": "Bearer k"},
			body: `{"model":"gpt"}`, status: 400, openAI: true, ctype: "application/json", rlHeads: true,
			want: `{"error":{"message":"Missing required parameter: 'messages'.","type":"invalid_request_error","param":"messages","code":"missing_required_parameter"}}`},
		{name: "openai unknown path", method: "GET", path: "/v1/models", hdr: map[string]string{"Authorization": "Bearer k"}, status: 404,
			openAI: true, ctype: "application/json", want: `{"error":{"message":"Invalid URL (GET /v1/models)","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "openai ok", method: "POST", path: "/v1/chat/completions", hdr: map[string]string{"Authorization": "Bearer k"},
			body: openAIBody, status: 200, openAI: true, ctype: "application/json", rlHeads: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{MaxBodyBytes: 1024, Limits: Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000, TPM: 200_000, CountTokensRPM: 100}})
			w := call(s, tc.method, tc.path, tc.hdr, tc.body)
			require.Equal(t, tc.status, w.Code, w.Body.String())
			require.Equal(t, tc.ctype, w.Header().Get("Content-Type"))
			if tc.openAI {
				require.Regexp(t, reqIDRe, w.Header().Get("x-request-id"))
				require.Equal(t, tc.rlHeads, w.Header().Get("x-ratelimit-limit-requests") != "")
			} else {
				require.Regexp(t, reqIDRe, w.Header().Get("request-id"))
				require.Equal(t, OrgIDDefault, w.Header().Get("anthropic-organization-id"))
				require.Equal(t, tc.rlHeads, w.Header().Get("anthropic-ratelimit-requests-limit") != "")
			}
			m := decode(t, w.Body.Bytes())
			if !tc.openAI && tc.status >= 400 {
				require.Equal(t, w.Header().Get("request-id"), m["request_id"], "body request_id matches header")
				m["request_id"] = ""
			}
			if tc.want != "" {
				got, err := json.Marshal(m)
				require.NoError(t, err)
				require.JSONEq(t, tc.want, string(got))
			}
		})
	}
}

func TestAnthropicMessageShapeAndHeaders(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{RPM: 1000, ITPM: 80_000, OTPM: 16_000}, OutputTokens: OutputRange{Min: 5, Max: 5}})
	body := `{"model":"claude-sonnet-4-5","max_tokens":4000,"messages":[{"role":"user","content":"` + strings.Repeat("a", 400) + `"}]}`
	w := anth(s, "k", body)
	require.Equal(t, 200, w.Code)
	h := w.Header()
	// Admitted at t0: 1 request, 100 input tokens, 4000 output reserved.
	want := map[string]string{
		"anthropic-ratelimit-requests-limit":          "1000",
		"anthropic-ratelimit-requests-remaining":      "999",
		"anthropic-ratelimit-requests-reset":          "2026-03-14T12:00:00Z", // 0.06 s, truncated
		"anthropic-ratelimit-input-tokens-limit":      "80000",
		"anthropic-ratelimit-input-tokens-remaining":  "80000", // 79,900 rounds to 80,000
		"anthropic-ratelimit-input-tokens-reset":      "2026-03-14T12:00:00Z",
		"anthropic-ratelimit-output-tokens-limit":     "16000",
		"anthropic-ratelimit-output-tokens-remaining": "12000",
		"anthropic-ratelimit-output-tokens-reset":     "2026-03-14T12:00:15Z", // 4000 / 266.67 per s
		"anthropic-ratelimit-tokens-limit":            "96000",
		"anthropic-ratelimit-tokens-remaining":        "92000",
		"anthropic-ratelimit-tokens-reset":            "2026-03-14T12:00:15Z",
	}
	for k, v := range want {
		require.Equal(t, v, h.Get(k), k)
	}
	m := decode(t, w.Body.Bytes())
	require.Regexp(t, `^msg_01[0-9A-Za-z]{22}$`, m["id"])
	require.Equal(t, "message", m["type"])
	require.Equal(t, "assistant", m["role"])
	require.Equal(t, "claude-sonnet-4-5", m["model"])
	require.Equal(t, "end_turn", m["stop_reason"])
	require.Nil(t, m["stop_sequence"])
	content := m["content"].([]any)
	require.Len(t, content, 1)
	text := content[0].(map[string]any)["text"].(string)
	require.Len(t, strings.Fields(text), 5, "one word per output token")
	require.Equal(t, map[string]any{"input_tokens": 100.0, "cache_creation_input_tokens": 0.0, "cache_read_input_tokens": 0.0,
		"cache_creation": map[string]any{"ephemeral_5m_input_tokens": 0.0, "ephemeral_1h_input_tokens": 0.0},
		"output_tokens":  5.0, "service_tier": "standard"}, m["usage"])
	// The reservation was reconciled to 5 actual tokens: 15,995 left.
	require.Equal(t, "16000", peekAnthropic(s, "k").Get("anthropic-ratelimit-output-tokens-remaining"))
	// Same body, same reply: generation is deterministic.
	w2 := anth(s, "k", body)
	require.Equal(t, text, decode(t, w2.Body.Bytes())["content"].([]any)[0].(map[string]any)["text"])
}

func TestOpenAICompletionShapeAndHeaders(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{RPM: 5000, TPM: 160_000}, OutputTokens: OutputRange{Min: 16, Max: 16}})
	w := oai(s, "k", `{"model":"gpt-4o-mini","max_tokens":16,"n":2,"messages":[{"role":"user","content":"`+strings.Repeat("b", 32)+`"}]}`)
	require.Equal(t, 200, w.Code, w.Body.String())
	h := w.Header()
	require.Equal(t, "5000", h.Get("x-ratelimit-limit-requests"))
	require.Equal(t, "4999", h.Get("x-ratelimit-remaining-requests"))
	require.Equal(t, "12ms", h.Get("x-ratelimit-reset-requests")) // 1 / 83.33 per s
	require.Equal(t, "160000", h.Get("x-ratelimit-limit-tokens"))
	require.Equal(t, "159960", h.Get("x-ratelimit-remaining-tokens")) // 8 prompt + 2×16 reserved
	require.Equal(t, "15ms", h.Get("x-ratelimit-reset-tokens"))       // 40 / 2666.7 per s
	m := decode(t, w.Body.Bytes())
	require.Equal(t, "chat.completion", m["object"])
	require.Regexp(t, `^chatcmpl-01`, m["id"])
	choices := m["choices"].([]any)
	require.Len(t, choices, 2)
	c0 := choices[0].(map[string]any)
	require.Equal(t, "length", c0["finish_reason"])
	require.Nil(t, c0["logprobs"])
	msg := c0["message"].(map[string]any)
	require.Equal(t, "assistant", msg["role"])
	require.Nil(t, msg["refusal"])
	require.Len(t, strings.Fields(msg["content"].(string)), 16)
	u := m["usage"].(map[string]any)
	require.Equal(t, []float64{8, 32, 40}, []float64{u["prompt_tokens"].(float64), u["completion_tokens"].(float64), u["total_tokens"].(float64)})
}

func TestAnthropicStreamSequence(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{OutputTokens: OutputRange{Min: 4, Max: 4}})
	body := `{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"Hello there"}]}`
	w := anth(s, "k", body)
	require.Equal(t, 200, w.Code)
	require.Equal(t, "text/event-stream; charset=utf-8", w.Header().Get("Content-Type"))
	evs := parseSSE(t, w.Body)
	var names []string
	var text strings.Builder
	for _, e := range evs {
		names = append(names, e.name)
		m := decode(t, []byte(e.data))
		require.Equal(t, e.name, m["type"], "data type equals the event name")
		if e.name == "content_block_delta" {
			d := m["delta"].(map[string]any)
			require.Equal(t, "text_delta", d["type"])
			text.WriteString(d["text"].(string))
		}
	}
	require.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	start := decode(t, []byte(evs[0].data))["message"].(map[string]any)
	require.Nil(t, start["stop_reason"])
	require.Equal(t, []any{}, start["content"])
	require.Equal(t, 3.0, start["usage"].(map[string]any)["input_tokens"])
	md := decode(t, []byte(evs[8].data))
	require.Equal(t, "end_turn", md["delta"].(map[string]any)["stop_reason"])
	require.Equal(t, 4.0, md["usage"].(map[string]any)["output_tokens"])
	require.Len(t, strings.Fields(text.String()), 4)
}

func TestOpenAIStreamSequence(t *testing.T) {
	t.Parallel()
	for _, includeUsage := range []bool{true, false} {
		s, _ := newMock(t, Config{OutputTokens: OutputRange{Min: 3, Max: 3}})
		body := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":` + map[bool]string{true: "true", false: "false"}[includeUsage] +
			`},"messages":[{"role":"user","content":"Hello there"}]}`
		w := oai(s, "k", body)
		require.Equal(t, 200, w.Code)
		require.Equal(t, "text/event-stream; charset=utf-8", w.Header().Get("Content-Type"))
		evs := parseSSE(t, w.Body)
		require.Equal(t, "[DONE]", evs[len(evs)-1].data)
		chunks := evs[:len(evs)-1]
		wantChunks := 5 // role, 3 content, finish
		if includeUsage {
			wantChunks++
		}
		require.Len(t, chunks, wantChunks)
		for i, e := range chunks {
			require.Empty(t, e.name)
			m := decode(t, []byte(e.data))
			require.Equal(t, "chat.completion.chunk", m["object"])
			u, hasUsage := m["usage"]
			require.Equal(t, includeUsage, hasUsage)
			last := i == len(chunks)-1
			switch {
			case includeUsage && last:
				require.Equal(t, []any{}, m["choices"])
				require.Equal(t, 3.0, u.(map[string]any)["completion_tokens"])
				require.Equal(t, 3.0, u.(map[string]any)["prompt_tokens"])
			case includeUsage:
				require.Nil(t, u)
			}
		}
		first := decode(t, []byte(chunks[0].data))["choices"].([]any)[0].(map[string]any)
		require.Equal(t, map[string]any{"role": "assistant", "content": ""}, first["delta"])
		fin := decode(t, []byte(chunks[4].data))["choices"].([]any)[0].(map[string]any)
		require.Equal(t, "stop", fin["finish_reason"])
		require.Equal(t, map[string]any{}, fin["delta"])
	}
}
