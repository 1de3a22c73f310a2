package provider_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestEstimateFor(t *testing.T) {
	t.Parallel()
	const over = provider.MessageOverheadTokens
	const req = provider.RequestOverheadTokens
	tests := []struct {
		name string
		p    llm.Protocol
		e    provider.Endpoint
		body string
		want provider.Cost
	}{
		{"responses string input", llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","input":"abcdefgh"}`,
			provider.Cost{Model: "gpt-4.1", InputTokens: over + 2 + req, OutputTokens: provider.OpenAIDefaultMaxTokens}},
		{"responses instructions, items, max_output_tokens, stream", llm.OpenAI, provider.EndpointResponses,
			`{"model":"gpt-4.1","stream":true,"max_output_tokens":100,"instructions":"abcd","input":[` +
				`{"role":"user","content":[{"type":"input_text","text":"abcdefgh"},{"type":"input_image","image_url":"https://x"}]},` +
				`{"type":"message","role":"assistant","content":"abcd"},` +
				`{"type":"function_call","call_id":"c","name":"abcd","arguments":"{\"a\":1}"},` +
				`{"type":"function_call_output","call_id":"c","output":"abcdefgh"}]}`,
			provider.Cost{Model: "gpt-4.1", Stream: true, OutputTokens: 100,
				InputTokens: (over + 1) + (over + 2 + provider.ImageTokens) + (over + 1) + (1 + 2) + 2 + req}},
		{"responses function tools", llm.OpenAI, provider.EndpointResponses,
			`{"model":"gpt-4.1","input":"abcd","tools":[{"type":"function","name":"abcd","description":"abcdefgh","parameters":{"a":1}},{"type":"web_search"}]}`,
			provider.Cost{Model: "gpt-4.1", OutputTokens: provider.OpenAIDefaultMaxTokens,
				InputTokens: over + 1 + provider.ToolUseSystemTokens + 1 + 2 + 2 + 6 + req}},
		{"responses previous turn", llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","previous_response_id":"resp_1","input":"abcd"}`,
			provider.Cost{Model: "gpt-4.1", InputTokens: over + 1 + req, OutputTokens: provider.OpenAIDefaultMaxTokens, PreviousResponseID: "resp_1"}},
		{"embeddings string", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"text-embedding-3-small","input":"abcdefghi"}`,
			provider.Cost{Model: "text-embedding-3-small", InputTokens: 3}},
		{"embeddings strings", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":["abcd","abcdefgh"],"dimensions":64}`,
			provider.Cost{Model: "e", InputTokens: 3}},
		{"embeddings tokens", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":[5,6,7]}`, provider.Cost{Model: "e", InputTokens: 3}},
		{"embeddings token arrays", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":[[5,6],[7]]}`, provider.Cost{Model: "e", InputTokens: 3}},
		{"count_tokens", llm.Anthropic, provider.EndpointCountTokens, `{"model":"claude-sonnet-4-5","system":"abcd","messages":[{"role":"user","content":"abcdefgh"}]}`,
			provider.Cost{Model: "claude-sonnet-4-5", InputTokens: over + 2 + 1 + req}},
		{"input_tokens", llm.OpenAI, provider.EndpointCountTokens,
			`{"model":"gpt-4.1","instructions":"abcd","previous_response_id":"resp_1","input":"abcdefgh","tools":[{"type":"function","name":"abcd"}]}`,
			provider.Cost{Model: "gpt-4.1", PreviousResponseID: "resp_1", InputTokens: (over + 1) + (over + 2) + provider.ToolUseSystemTokens + 1 + req}},
		{"input_tokens without a model", llm.OpenAI, provider.EndpointCountTokens, `{"input":"abcdefgh"}`,
			provider.Cost{InputTokens: over + 2 + req}},
		{"chat is EstimateWith", llm.Anthropic, provider.EndpointChat, anthropicRequest, mustEstimate(t, llm.Anthropic, anthropicRequest)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := provider.EstimateFor(tt.p, tt.e, []byte(tt.body), nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func mustEstimate(t *testing.T, p llm.Protocol, body string) provider.Cost {
	t.Helper()
	c, err := provider.Estimate(p, []byte(body))
	require.NoError(t, err)
	return c
}

func TestEstimateForErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    llm.Protocol
		e    provider.Endpoint
		body string
		want string
	}{
		{"responses no model", llm.OpenAI, provider.EndpointResponses, `{"input":"x"}`, "Missing required parameter: 'model'."},
		{"responses small max_output_tokens", llm.OpenAI, provider.EndpointResponses, `{"model":"m","max_output_tokens":8}`, "Expected a value >= 16, but got 8"},
		{"responses bad input", llm.OpenAI, provider.EndpointResponses, `{"model":"m","input":5}`, "Invalid type for 'input'"},
		{"responses bad item", llm.OpenAI, provider.EndpointResponses, `{"model":"m","input":[{"role":1}]}`, "Invalid type for 'input[0].role'"},
		{"responses not json", llm.OpenAI, provider.EndpointResponses, `{`, "could not parse the JSON body"},
		{"embeddings no input", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e"}`, "Missing required parameter: 'input'."},
		{"embeddings empty", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":""}`, "'$.input' is invalid"},
		{"embeddings mixed", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":["a",1]}`, "'$.input' is invalid"},
		{"embeddings empty token array", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":[[1],[]]}`, "'$.input' is invalid"},
		{"embeddings too many", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":[` + strings.Repeat(`"a",`, 2048) + `"a"]}`, "maximum length of array is 2048"},
		{"embeddings dimensions", llm.OpenAI, provider.EndpointEmbeddings, `{"model":"e","input":"a","dimensions":0}`, "Invalid 'dimensions'"},
		{"count_tokens no messages", llm.Anthropic, provider.EndpointCountTokens, `{"model":"m"}`, "messages: Field required"},
		{"input_tokens bad input", llm.OpenAI, provider.EndpointCountTokens, `{"model":"m","input":5}`, "Invalid type for 'input'"},
		{"input_tokens bad model", llm.OpenAI, provider.EndpointCountTokens, `{"model":5,"input":"x"}`, "'model'"},
		{"input_tokens not an object", llm.OpenAI, provider.EndpointCountTokens, `[]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.EstimateFor(tt.p, tt.e, []byte(tt.body), nil)
			require.ErrorIs(t, err, provider.ErrInvalidRequest)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := provider.EstimateFor(llm.Anthropic, provider.EndpointEmbeddings, []byte(`{}`), nil)
	require.ErrorIs(t, err, provider.ErrUnknownEndpoint)
	require.False(t, errors.Is(err, provider.ErrInvalidRequest))
	_, err = provider.EstimateFor(llm.Anthropic, provider.EndpointResponses, []byte(`{}`), nil)
	require.ErrorIs(t, err, provider.ErrUnknownEndpoint)
}

func TestEndpointOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    llm.Protocol
		path string
		want provider.Endpoint
		ok   bool
	}{
		{llm.Anthropic, "/v1/messages", provider.EndpointChat, true},
		{llm.Anthropic, "/v1/messages/count_tokens", provider.EndpointCountTokens, true},
		{llm.Anthropic, "/v1/messages/batches", 0, false},
		{llm.OpenAI, "/v1/chat/completions", provider.EndpointChat, true},
		{llm.OpenAI, "/openai/v1/responses/", provider.EndpointResponses, true},
		{llm.OpenAI, "/v1/responses/resp_1", 0, false},
		{llm.OpenAI, "/v1/responses/resp_1/cancel", 0, false},
		{llm.OpenAI, "/v1/responses/input_tokens", provider.EndpointCountTokens, true},
		{llm.OpenAI, "/openai/v1/responses/input_tokens/", provider.EndpointCountTokens, true},
		{llm.Anthropic, "/v1/responses/input_tokens", 0, false},
		{llm.OpenAI, "/v1/messages/count_tokens", 0, false},
		{llm.OpenAI, "/v1/embeddings", provider.EndpointEmbeddings, true},
		{llm.OpenAI, "/v1/models", 0, false},
	}
	for _, tt := range tests {
		got, ok := provider.EndpointOf(tt.p, tt.path)
		require.Equal(t, tt.ok, ok, tt.path)
		require.Equal(t, tt.want, got, tt.path)
	}
	require.Equal(t, "responses", provider.EndpointResponses.String())
	require.Equal(t, "endpoint(9)", provider.Endpoint(9).String())
}

// FuzzEstimateFor: the endpoint estimates never panic, price what they
// accept sanely and reject with a *RequestError.
func FuzzEstimateFor(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4.1","input":"abcdefgh"}`, `{"model":"m","input":[{"role":"user","content":[{"type":"input_image"}]},{"type":"reasoning","summary":[]}]}`,
		`{"model":"m","instructions":[{"role":"developer","content":"x"}],"tools":[{"type":"function","name":"f","parameters":{}}],"max_output_tokens":16}`,
		`{"model":"e","input":[[1,2],[3]]}`, `{"model":"e","input":["a","b"]}`, `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`null`, `[]`, `{"model":"m","input":null,"previous_response_id":5}`, `{"input":[{"type":"function_call_output","output":[1]}]}`,
	} {
		for e := range 4 {
			f.Add(s, uint8(e), true)
			f.Add(s, uint8(e), false)
		}
	}
	f.Fuzz(func(t *testing.T, body string, e uint8, openai bool) {
		p := llm.Anthropic
		if openai {
			p = llm.OpenAI
		}
		ep := provider.Endpoint(e % 4)
		c, err := provider.EstimateFor(p, ep, []byte(body), nil)
		if err != nil {
			if !errors.Is(err, provider.ErrUnknownEndpoint) {
				require.ErrorIs(t, err, provider.ErrInvalidRequest)
				require.NotRegexp(t, goIdentifier, err.Error())
			}
			return
		}
		if !openai || ep != provider.EndpointCountTokens {
			require.NotEmpty(t, c.Model) // a count's model is optional on OpenAI
		}
		require.GreaterOrEqual(t, c.InputTokens, int64(0))
		require.GreaterOrEqual(t, c.OutputTokens, int64(0))
		switch ep {
		case provider.EndpointResponses:
			require.GreaterOrEqual(t, c.OutputTokens, int64(provider.MinMaxOutputTokens))
		case provider.EndpointEmbeddings, provider.EndpointCountTokens:
			require.Zero(t, c.OutputTokens)
		case provider.EndpointChat:
		}
	})
}
