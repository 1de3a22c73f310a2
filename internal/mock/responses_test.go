package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
)

// respCall sends one Responses API request.
func respCall(s *Server, method, path, key, body string) (int, map[string]any, http.Header) {
	w := call(s, method, path, map[string]string{"Authorization": "Bearer " + key}, body)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, m, w.Header()
}

func createResponse(t *testing.T, s *Server, key, body string) map[string]any {
	t.Helper()
	code, m, _ := respCall(s, "POST", "/v1/responses", key, body)
	require.Equal(t, 200, code, m)
	return m
}

func usageOf(t *testing.T, r map[string]any) (input, cached, output, reasoning, total float64) {
	t.Helper()
	u := r["usage"].(map[string]any)
	return u["input_tokens"].(float64), u["input_tokens_details"].(map[string]any)["cached_tokens"].(float64),
		u["output_tokens"].(float64), u["output_tokens_details"].(map[string]any)["reasoning_tokens"].(float64),
		u["total_tokens"].(float64)
}

// outputText joins the output_text parts of a response's message items.
func outputText(r map[string]any) string {
	var b strings.Builder
	for _, it := range r["output"].([]any) {
		item := it.(map[string]any)
		if item["type"] != "message" {
			continue
		}
		for _, c := range item["content"].([]any) {
			b.WriteString(c.(map[string]any)["text"].(string))
		}
	}
	return b.String()
}

func TestResponsesCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		out        int64 // Config.OutputTokens (fixed length)
		status     string
		reasoning  float64
		items      []string
		incomplete bool
		tier       string
	}{
		{"string input", `{"model":"gpt-4.1","input":"Hello there"}`, 5, "completed", 0, []string{"message"}, false, "default"},
		{"items and instructions", `{"model":"gpt-4.1","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"Hello there"}]},{"type":"function_call_output","call_id":"c1","output":"42"}]}`,
			5, "completed", 0, []string{"message"}, false, "default"},
		{"reasoning", `{"model":"o4-mini","input":"Hello there","reasoning":{"effort":"low"}}`, 9, "completed", 3, []string{"reasoning", "message"}, false, "default"},
		{"max_output_tokens reached", `{"model":"gpt-4.1","input":"Hello there","max_output_tokens":16}`, 16, "incomplete", 0, []string{"message"}, true, "default"},
		{"priority tier", `{"model":"gpt-4.1","input":"Hello there","service_tier":"priority"}`, 5, "completed", 0, []string{"message"}, false, "priority"},
		{"auto tier", `{"model":"gpt-4.1","input":"Hello there","service_tier":"auto"}`, 5, "completed", 0, []string{"message"}, false, "default"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Limits: Limits{RPM: 500, TPM: 200_000}, OutputTokens: OutputRange{Min: tc.out, Max: tc.out}})
			code, r, h := respCall(s, "POST", "/v1/responses", "k", tc.body)
			require.Equal(t, 200, code, r)
			require.Equal(t, "499", h.Get("x-ratelimit-remaining-requests"))
			require.Regexp(t, `^resp_[0-9a-f]{48}$`, r["id"])
			require.Equal(t, "response", r["object"])
			require.Equal(t, tc.status, r["status"])
			require.Equal(t, tc.tier, r["service_tier"])
			var types []string
			for _, it := range r["output"].([]any) {
				types = append(types, it.(map[string]any)["type"].(string))
			}
			require.Equal(t, tc.items, types)
			in, cached, out, reasoning, total := usageOf(t, r)
			require.Equal(t, float64(tc.out), out)
			require.Equal(t, tc.reasoning, reasoning)
			require.Zero(t, cached)
			require.Equal(t, in+out, total)
			require.Len(t, strings.Fields(outputText(r)), int(tc.out-int64(tc.reasoning)), "one word per visible token")
			if tc.incomplete {
				require.Equal(t, map[string]any{"reason": "max_output_tokens"}, r["incomplete_details"])
				require.Nil(t, r["completed_at"])
			} else {
				require.Nil(t, r["incomplete_details"])
				require.NotNil(t, r["completed_at"])
			}
			st := s.Stats().Keys["k"]
			require.Equal(t, map[string]int64{EndpointResponses: 1}, st.ByEndpoint)
			require.Equal(t, map[string]int64{tc.tier: 1}, st.ByServiceTier)
			require.Equal(t, Counts{Requests: 1, InputTokens: int64(in), OutputTokens: tc.out, Tokens: int64(total)}, st.Admitted)
		})
	}
}

func TestResponsesStreamSequence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		cfg   Config
		names []string
		last  string
	}{
		{"completed", `{"model":"gpt-4.1","input":"Hello there","stream":true}`, Config{OutputTokens: OutputRange{Min: 3, Max: 3}},
			[]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
				"response.content_part.done", "response.output_item.done", "response.completed"}, "completed"},
		{"reasoning", `{"model":"o4-mini","input":"Hello there","stream":true,"reasoning":{"effort":"high"}}`, Config{OutputTokens: OutputRange{Min: 4, Max: 4}},
			[]string{"response.created", "response.in_progress", "response.output_item.added", "response.output_item.done",
				"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
				"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
				"response.completed"}, "completed"},
		{"incomplete", `{"model":"gpt-4.1","input":"Hello there","stream":true,"max_output_tokens":16}`, Config{OutputTokens: OutputRange{Min: 16, Max: 16}},
			append(append([]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"},
				repeat("response.output_text.delta", 16)...), "response.output_text.done", "response.content_part.done",
				"response.output_item.done", "response.incomplete"), "incomplete"},
		{"failed mid-stream", `{"model":"gpt-4.1","input":"Hello there","stream":true}`,
			Config{OutputTokens: OutputRange{Min: 5, Max: 5}, Faults: Faults{StreamErrorRate: 1, StreamErrorAfter: 2}},
			[]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.delta", "response.failed"}, "failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, tc.cfg)
			w := call(s, "POST", "/v1/responses", map[string]string{"Authorization": "Bearer k"}, tc.body)
			require.Equal(t, 200, w.Code)
			require.Equal(t, "text/event-stream; charset=utf-8", w.Header().Get("Content-Type"))
			evs := parseSSE(t, w.Body)
			var names []string
			var text strings.Builder
			var final map[string]any
			for i, e := range evs {
				names = append(names, e.name)
				m := decode(t, []byte(e.data))
				require.Equal(t, e.name, m["type"])
				require.Equal(t, float64(i), m["sequence_number"])
				if e.name == "response.output_text.delta" {
					text.WriteString(m["delta"].(string))
				}
				if resp, ok := m["response"].(map[string]any); ok {
					final = resp
				}
			}
			require.Equal(t, tc.names, names)
			require.Equal(t, tc.last, final["status"])
			require.Equal(t, text.String(), outputText(final), "the final response holds what was streamed")
			_, _, out, _, _ := usageOf(t, final)
			require.Equal(t, float64(s.Stats().Keys["k"].Admitted.OutputTokens), out, "usage is what was charged")
			if tc.last == "failed" {
				require.Equal(t, map[string]any{"code": "server_error", "message": failedMessage}, final["error"])
			}
			// The stored response agrees with the stream.
			_, got, _ := respCall(s, "GET", "/v1/responses/"+final["id"].(string), "k", "")
			require.Equal(t, tc.last, got["status"])
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestResponsesPreviousTurn: previous_response_id adds the previous turn's
// input and output to the input tokens, and its prefix is read from the
// key's cache.
func TestResponsesPreviousTurn(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{OutputTokens: OutputRange{Min: 4, Max: 4}})
	doc := strings.Repeat("d", 4*1200) // 1200 tokens
	r1 := createResponse(t, s, "k", `{"model":"gpt-4.1","instructions":"be brief","input":"`+doc+`"}`)
	in1, cached1, out1, _, _ := usageOf(t, r1)
	require.Equal(t, 1202.0, in1) // "be brief" is 2 tokens
	require.Zero(t, cached1)
	r2 := createResponse(t, s, "k", `{"model":"gpt-4.1","instructions":"be brief","previous_response_id":"`+r1["id"].(string)+`","input":"and then?"}`)
	in2, cached2, _, _, _ := usageOf(t, r2)
	text1 := outputText(r1)
	require.Equal(t, float64(tokensOf(len("be brief")+len(doc)+len(text1)+len("and then?"))), in2, "the previous input and output are input again")
	require.Equal(t, 1152.0, cached2, "the previous prompt's prefix is cached (1024 + 128)")
	require.Equal(t, r1["id"], r2["previous_response_id"])
	require.Greater(t, in2, in1+out1-1)
	// Another key cannot continue it: it does not exist there.
	code, m, _ := respCall(s, "POST", "/v1/responses", "other", `{"model":"gpt-4.1","previous_response_id":"`+r1["id"].(string)+`","input":"x"}`)
	require.Equal(t, 400, code)
	require.Equal(t, "previous_response_not_found", m["error"].(map[string]any)["code"])
}

func TestResponsesStorePerKey(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{OutputTokens: OutputRange{Min: 2, Max: 2}})
	r := createResponse(t, s, "k", `{"model":"gpt-4.1","input":[{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three"}]}`)
	id := r["id"].(string)
	code, got, h := respCall(s, "GET", "/v1/responses/"+id, "k", "")
	require.Equal(t, 200, code)
	require.Equal(t, r, got)
	require.Empty(t, h.Get("x-ratelimit-remaining-requests"), "retrieval takes no quota")
	code, m, _ := respCall(s, "GET", "/v1/responses/"+id, "other", "")
	require.Equal(t, 404, code)
	require.Equal(t, map[string]any{"message": "Response with id '" + id + "' not found.", "type": "invalid_request_error", "param": nil, "code": nil}, m["error"])

	// input_items: newest first by default, pages with limit and after.
	list := func(q string) (texts []string, more bool) {
		code, m, _ := respCall(s, "GET", "/v1/responses/"+id+"/input_items"+q, "k", "")
		require.Equal(t, 200, code, m)
		require.Equal(t, "list", m["object"])
		for _, it := range m["data"].([]any) {
			c := it.(map[string]any)["content"].([]any)[0].(map[string]any)
			texts = append(texts, c["text"].(string))
		}
		return texts, m["has_more"].(bool)
	}
	texts, more := list("")
	require.Equal(t, []string{"three", "two", "one"}, texts)
	require.False(t, more)
	texts, more = list("?order=asc&limit=2")
	require.Equal(t, []string{"one", "two"}, texts)
	require.True(t, more)
	_, m, _ = respCall(s, "GET", "/v1/responses/"+id+"/input_items?order=asc&limit=1", "k", "")
	texts, _ = list("?order=asc&after=" + m["last_id"].(string))
	require.Equal(t, []string{"two", "three"}, texts)

	code, m, _ = respCall(s, "DELETE", "/v1/responses/"+id, "other", "")
	require.Equal(t, 404, code, m)
	code, m, _ = respCall(s, "DELETE", "/v1/responses/"+id, "k", "")
	require.Equal(t, 200, code)
	require.Equal(t, map[string]any{"id": id, "object": "response.deleted", "deleted": true}, m)
	code, _, _ = respCall(s, "GET", "/v1/responses/"+id, "k", "")
	require.Equal(t, 404, code)

	unstored := createResponse(t, s, "k", `{"model":"gpt-4.1","input":"hi","store":false}`)
	code, _, _ = respCall(s, "GET", "/v1/responses/"+unstored["id"].(string), "k", "")
	require.Equal(t, 404, code, "store: false is not remembered")
}

// TestResponsesBackground runs a background response on the fake clock:
// queued for BackgroundQueue, in progress while its tokens are produced,
// then completed; a cancelled one stops where it was and gives back what it
// will not produce.
func TestResponsesBackground(t *testing.T) {
	t.Parallel()
	cfg := Config{Limits: Limits{TPM: 100_000}, BackgroundQueue: time.Second, TTFT: time.Second, PerToken: 100 * time.Millisecond,
		OutputTokens: OutputRange{Min: 10, Max: 10}}
	body := `{"model":"gpt-4.1","input":"Hello there","background":true,"max_output_tokens":100}`
	at := func(fc *clock.Fake, d time.Duration) { fc.Set(t0.Add(d)) }
	get := func(s *Server, id string) map[string]any {
		code, m, _ := respCall(s, "GET", "/v1/responses/"+id, "k", "")
		require.Equal(t, 200, code, m)
		return m
	}
	t.Run("queued, in progress, completed", func(t *testing.T) {
		t.Parallel()
		s, fc := newMock(t, cfg)
		r := createResponse(t, s, "k", body)
		require.Equal(t, "queued", r["status"])
		require.Equal(t, true, r["background"])
		require.Nil(t, r["usage"])
		id := r["id"].(string)
		steps := []struct {
			at     time.Duration
			status string
			words  int
		}{
			{500 * time.Millisecond, "queued", 0},
			{1500 * time.Millisecond, "in_progress", 0},
			{2450 * time.Millisecond, "in_progress", 5}, // tokens at 2.0, 2.1, 2.2, 2.3, 2.4 s
			{2900 * time.Millisecond, "completed", 10},
			{time.Hour, "completed", 10},
		}
		for _, st := range steps {
			at(fc, st.at)
			m := get(s, id)
			require.Equal(t, st.status, m["status"], st.at)
			require.Len(t, strings.Fields(outputText(m)), st.words, st.at)
		}
		_, _, out, _, _ := usageOf(t, get(s, id))
		require.Equal(t, 10.0, out)
		code, m, _ := respCall(s, "POST", "/v1/responses/"+id+"/cancel", "k", "")
		require.Equal(t, 400, code, "a completed response cannot be cancelled")
		require.Contains(t, m["error"].(map[string]any)["message"], "status 'completed'")
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.Limits, c.BurstSeconds = Limits{TPM: 60}, 3600 // a deep bucket that refills 1 token a second
		s, fc := newMock(t, c)
		r := createResponse(t, s, "k", body)
		id := r["id"].(string)
		// Charged at creation: 3 input + the 10 output it will produce.
		require.Equal(t, int64(3+10), s.Stats().Keys["k"].Admitted.Tokens)
		// A refused body shows the buckets and charges nothing.
		remaining := func() string {
			_, _, h := respCall(s, "POST", "/v1/responses", "k", `{"model":`)
			return h.Get("x-ratelimit-remaining-tokens")
		}
		at(fc, 2450*time.Millisecond)
		require.Equal(t, "3589", remaining()) // 3600 − 13 + 2.45 refilled
		code, m, _ := respCall(s, "POST", "/v1/responses/"+id+"/cancel", "k", "")
		require.Equal(t, 200, code, m)
		require.Equal(t, "cancelled", m["status"])
		_, _, out, _, _ := usageOf(t, m)
		require.Equal(t, 5.0, out)
		require.Equal(t, Counts{Requests: 1, InputTokens: 3, OutputTokens: 5, Tokens: 8}, s.Stats().Keys["k"].Admitted, "the unproduced output was given back")
		require.Equal(t, int64(8), s.Stats().Keys["k"].Max60s.Tokens)
		require.Equal(t, "3594", remaining(), "TPM got the 5 unproduced tokens back")
		at(fc, time.Hour)
		require.Equal(t, "cancelled", get(s, id)["status"], "a cancel freezes the response")
		code, m, _ = respCall(s, "POST", "/v1/responses/"+id+"/cancel", "k", "")
		require.Equal(t, 200, code, "cancelling twice answers the cancelled response")
		require.Equal(t, "cancelled", m["status"])
	})
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		c := cfg
		c.Faults = Faults{StreamErrorRate: 1, StreamErrorAfter: 4}
		s, fc := newMock(t, c)
		id := createResponse(t, s, "k", body)["id"].(string)
		at(fc, 2350*time.Millisecond)
		require.Equal(t, "failed", get(s, id)["status"], "failed after its 4th token, at 2.3 s")
		m := get(s, id)
		require.Len(t, strings.Fields(outputText(m)), 4)
		require.Equal(t, "server_error", m["error"].(map[string]any)["code"])
		require.Equal(t, int64(4), s.Stats().Keys["k"].Admitted.OutputTokens)
	})
	t.Run("foreground cannot be cancelled", func(t *testing.T) {
		t.Parallel()
		s, _ := newMock(t, Config{})
		id := createResponse(t, s, "k", `{"model":"gpt-4.1","input":"hi"}`)["id"].(string)
		code, m, _ := respCall(s, "POST", "/v1/responses/"+id+"/cancel", "k", "")
		require.Equal(t, 400, code)
		require.Contains(t, m["error"].(map[string]any)["message"], "background=true")
	})
}

func TestResponsesTiers(t *testing.T) {
	t.Parallel()
	t.Run("flex is slower", func(t *testing.T) {
		t.Parallel()
		s, fc := newMock(t, Config{TTFT: time.Second, OutputTokens: OutputRange{Min: 1, Max: 1}})
		done := make(chan map[string]any)
		go func() {
			_, m, _ := respCall(s, "POST", "/v1/responses", "k", `{"model":"o4-mini","input":"hi","service_tier":"flex"}`)
			done <- m
		}()
		require.True(t, fc.WaitForTimers(1, 5*time.Second))
		fc.Advance(time.Second)
		require.True(t, fc.WaitForTimers(1, 5*time.Second), "still waiting after the default TTFT")
		fc.Advance(time.Second)
		m := <-done
		require.Equal(t, "flex", m["service_tier"])
	})
	t.Run("flex may be unavailable, uncharged", func(t *testing.T) {
		t.Parallel()
		s, _ := newMock(t, Config{Limits: Limits{RPM: 10, TPM: 10_000}, Faults: Faults{FlexUnavailableRate: 1}})
		code, m, h := respCall(s, "POST", "/v1/responses", "k", `{"model":"o4-mini","input":"hi","service_tier":"flex"}`)
		require.Equal(t, 429, code)
		e := m["error"].(map[string]any)
		require.Equal(t, "resource_unavailable", e["code"])
		require.Empty(t, h.Get("retry-after"))
		require.Equal(t, "10", h.Get("x-ratelimit-remaining-requests"), "not charged")
		code, _, _ = respCall(s, "POST", "/v1/responses", "k", `{"model":"o4-mini","input":"hi"}`)
		require.Equal(t, 200, code, "other tiers are served")
		code, m = oaiCode(s, `{"model":"o4-mini","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, 429, code, "chat completions share the rule")
		require.Equal(t, "resource_unavailable", m["error"].(map[string]any)["code"])
	})
}

func oaiCode(s *Server, body string) (int, map[string]any) {
	w := oai(s, "k", body)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, m
}

func TestResponsesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, param, code, msg string
	}{
		{"no model", `{"input":"hi"}`, "model", "missing_required_parameter", "Missing required parameter: 'model'."},
		{"no input", `{"model":"gpt-4.1"}`, "input", "missing_required_parameter", "Missing required parameter: 'input'."},
		{"small max_output_tokens", `{"model":"gpt-4.1","input":"hi","max_output_tokens":15}`, "max_output_tokens", "integer_below_min_value", "Expected a value >= 16."},
		{"background without store", `{"model":"gpt-4.1","input":"hi","background":true,"store":false}`, "background", "invalid_value", "requires 'store' to be true"},
		{"unknown previous", `{"model":"gpt-4.1","input":"hi","previous_response_id":"resp_nope"}`, "previous_response_id", "previous_response_not_found", "Previous response with id 'resp_nope' not found."},
		{"bad role", `{"model":"gpt-4.1","input":[{"role":"robot","content":"x"}]}`, "input[0].role", "invalid_value", "supported values"},
		{"bad tier", `{"model":"gpt-4.1","input":"hi","service_tier":"gold"}`, "service_tier", "invalid_value", "supported values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{})
			code, m, _ := respCall(s, "POST", "/v1/responses", "k", tc.body)
			require.Equal(t, 400, code)
			e := m["error"].(map[string]any)
			require.Equal(t, tc.param, e["param"])
			require.Equal(t, tc.code, e["code"])
			require.Contains(t, e["message"], tc.msg)
		})
	}
}
