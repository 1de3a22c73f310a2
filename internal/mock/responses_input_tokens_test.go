package mock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInputTokensMatchesResponses: POST /v1/responses/input_tokens counts
// exactly the input a Responses create of the same body is charged (and
// reports in usage.input_tokens), the previous turn included, without a
// model, and takes nothing from the Responses buckets.
func TestInputTokensMatchesResponses(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"string":       `{"model":"gpt-4.1","input":"Hello there, how many tokens is this?"}`,
		"instructions": `{"model":"gpt-4.1","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"Hello"}]},{"type":"function_call_output","call_id":"c1","output":"42"}]}`,
		"tools":        `{"model":"gpt-4.1","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"input":"weather?"}`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Limits: Limits{RPM: 500, TPM: 200_000, CountTokensRPM: 100}})
			code, m, h := respCall(s, "POST", "/v1/responses/input_tokens", "k", body)
			require.Equal(t, 200, code, m)
			require.Equal(t, "response.input_tokens", m["object"])
			require.Equal(t, "100", h.Get("x-ratelimit-limit-requests"), "its own bucket")
			require.Equal(t, "99", h.Get("x-ratelimit-remaining-requests"))
			require.Empty(t, h.Get("x-ratelimit-limit-tokens"), "no token bucket")
			counted := m["input_tokens"].(float64)
			created := createResponse(t, s, "k", body)
			input, _, _, _, _ := usageOf(t, created)
			require.Equal(t, input, counted)
			code, m, h = respCall(s, "POST", "/v1/responses/input_tokens", "k", body)
			require.Equal(t, 200, code, m)
			require.Equal(t, counted, m["input_tokens"], "the cache read by the create changes no count")
			require.Equal(t, "98", h.Get("x-ratelimit-remaining-requests"))

			// The next turn: the count includes the previous one, as the
			// create does; another key does not know the response.
			next := `{"previous_response_id":"` + created["id"].(string) + `","input":"and then?"}`
			code, m, _ = respCall(s, "POST", "/v1/responses/input_tokens", "k", next)
			require.Equal(t, 200, code, m)
			turn := createResponse(t, s, "k", `{"model":"gpt-4.1","previous_response_id":"`+created["id"].(string)+`","input":"and then?"}`)
			input, _, _, _, _ = usageOf(t, turn)
			require.Equal(t, input, m["input_tokens"])
			code, m, _ = respCall(s, "POST", "/v1/responses/input_tokens", "other", next)
			require.Equal(t, 400, code, m)
			require.Equal(t, "previous_response_not_found", m["error"].(map[string]any)["code"])

			st := s.Stats().Keys["k"]
			require.Equal(t, map[string]int64{EndpointInputTokens: 3, EndpointResponses: 2}, st.ByEndpoint)
			require.Equal(t, int64(2), st.Admitted.Requests, "counting is not a model admission")
		})
	}
}

// TestInputTokensHasItsOwnBucket: the count and the Responses API have
// separate and independent rate limits, each with its own headers; a
// refused count is OpenAI's 429 with retry-after.
func TestInputTokensHasItsOwnBucket(t *testing.T) {
	t.Parallel()
	s, _ := newMock(t, Config{Limits: Limits{RPM: 3, TPM: 200_000, CountTokensRPM: 2}})
	const body = `{"model":"gpt-4.1","input":"count me"}`
	for range 2 {
		code, m, _ := respCall(s, "POST", "/v1/responses/input_tokens", "k", body)
		require.Equal(t, 200, code, m)
	}
	code, m, h := respCall(s, "POST", "/v1/responses/input_tokens", "k", body)
	require.Equal(t, 429, code)
	require.Equal(t, "30", h.Get("retry-after"), "one request at 2 per minute")
	e := m["error"].(map[string]any)
	require.Equal(t, "rate_limit_exceeded", e["code"])
	require.Equal(t, "requests", e["type"])
	require.Contains(t, e["message"], "on requests per min (RPM): Limit 2, Used 2, Requested 1")
	require.Equal(t, "0", h.Get("x-ratelimit-remaining-requests"))

	for i := range 3 {
		code, m, h := respCall(s, "POST", "/v1/responses", "k", body)
		require.Equal(t, 200, code, m)
		require.Equal(t, "3", h.Get("x-ratelimit-limit-requests"))
		require.Equal(t, []string{"2", "1", "0"}[i], h.Get("x-ratelimit-remaining-requests"))
	}
	code, _, _ = respCall(s, "POST", "/v1/responses", "k", body)
	require.Equal(t, 429, code)
	code, _, _ = respCall(s, "POST", "/v1/responses/input_tokens", "other", body)
	require.Equal(t, 200, code, "another key has its own counting bucket")

	// A bad body is OpenAI's 400; a GET is not the route: it reads a
	// stored response of that id, which there is not.
	code, m, _ = respCall(s, "POST", "/v1/responses/input_tokens", "k2", `{"input":5}`)
	require.Equal(t, 400, code, m)
	code, _, _ = respCall(s, "GET", "/v1/responses/input_tokens", "k2", "")
	require.Equal(t, 404, code)
	require.Equal(t, map[string]int64{EndpointInputTokens: 2, EndpointResponses: 3}, s.Stats().Keys["k"].ByEndpoint)
}
