package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestScheduledEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p      llm.Protocol
		method string
		path   string
		want   provider.Endpoint
		ok     bool
	}{
		{llm.OpenAI, "POST", "/v1/chat/completions", provider.EndpointChat, true},
		{llm.OpenAI, "POST", "/v1/responses", provider.EndpointResponses, true},
		{llm.OpenAI, "POST", "/v1/responses?x=1", provider.EndpointResponses, true},
		{llm.OpenAI, "POST", "/v1/embeddings", provider.EndpointEmbeddings, true},
		{llm.OpenAI, "", "/v1/embeddings", provider.EndpointEmbeddings, true},
		{llm.OpenAI, "GET", "/v1/responses", 0, false},
		{llm.OpenAI, "POST", "/v1/responses/resp_1/cancel", 0, false},
		{llm.OpenAI, "POST", "/v1/responses/input_tokens", 0, false},
		{llm.Anthropic, "POST", "/v1/messages/count_tokens", 0, false},
		{llm.OpenAI, "POST", "/v1/files/responses", 0, false},
		{llm.OpenAI, "POST", "/v1/messages", 0, false},
		{llm.Anthropic, "POST", "/v1/messages", provider.EndpointChat, true},
		{llm.Anthropic, "POST", "/v1/messages?beta=true", provider.EndpointChat, true},
		{llm.Anthropic, "POST", "/v1/responses", 0, false},
		{llm.Anthropic, "POST", "/v1/embeddings", 0, false},
		{llm.Anthropic, "POST", "/v1/messages/batches", 0, false},
	}
	for _, tt := range tests {
		got, ok := provider.ScheduledEndpoint(tt.p, tt.method, tt.path)
		require.Equal(t, tt.ok, ok, "%s %s %s", tt.p, tt.method, tt.path)
		require.Equal(t, tt.want, got, "%s %s %s", tt.p, tt.method, tt.path)
	}
	require.Equal(t, []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"}, provider.ScheduledPaths(llm.OpenAI))
	require.Equal(t, []string{"/v1/messages"}, provider.ScheduledPaths(llm.Anthropic))
}

func TestForeignEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p            llm.Protocol
		method, path string
		want         llm.Protocol
		ok           bool
	}{
		{llm.Anthropic, "POST", "/v1/chat/completions", llm.OpenAI, true},
		{llm.Anthropic, "POST", "/v1/responses?x=1", llm.OpenAI, true},
		{llm.Anthropic, "POST", "/v1/embeddings", llm.OpenAI, true},
		{llm.OpenAI, "POST", "/v1/messages", llm.Anthropic, true},
		{llm.OpenAI, "POST", "/v1/messages/count_tokens", llm.Anthropic, true},
		{llm.Anthropic, "POST", "/v1/responses/input_tokens", llm.OpenAI, true},
		{llm.OpenAI, "POST", "/v1/responses/input_tokens", "", false},
		{llm.Anthropic, "POST", "/v1/messages", "", false},
		{llm.OpenAI, "POST", "/v1/chat/completions", "", false},
		{llm.Anthropic, "GET", "/v1/chat/completions", "", false},
		{llm.Anthropic, "POST", "/v1/models", "", false},
		{llm.OpenAI, "POST", "/v1/messages/batches", "", false},
		{llm.Anthropic, "POST", "/v1/responses/resp_1/cancel", "", false},
	}
	for _, tc := range tests {
		got, ok := provider.ForeignEndpoint(tc.p, tc.method, tc.path)
		require.Equal(t, tc.ok, ok, "%s %s %s", tc.p, tc.method, tc.path)
		require.Equal(t, tc.want, got, "%s %s %s", tc.p, tc.method, tc.path)
	}
}

func TestResponsesPathID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path, id string
		ok       bool
	}{
		{"/v1/responses/resp_1", "resp_1", true},
		{"/v1/responses/resp_1?include=x", "resp_1", true},
		{"/v1/responses/resp_1/cancel", "resp_1", true},
		{"/v1/responses/resp_1/input_items", "resp_1", true},
		{"/v1/responses/resp_1/other", "", false},
		{"/v1/responses/input_tokens", "", false},
		{"/v1/responses/input_tokens?x=1", "", false},
		{"/v1/responses/", "", false},
		{"/v1/responses", "", false},
		{"/v1/chat/completions/x", "", false},
	}
	for _, tt := range tests {
		id, ok := provider.ResponsesPathID(tt.path)
		require.Equal(t, tt.ok, ok, tt.path)
		require.Equal(t, tt.id, id, tt.path)
	}
}

func TestCountsTokens(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]bool{
		"/v1/messages/count_tokens": true, "/anthropic/v1/messages/count_tokens?beta=true": true,
		"/v1/responses/input_tokens": true, "/openai/v1/responses/input_tokens": true,
		"/v1/messages": false, "/v1/responses": false, "/v1/responses/resp_1/input_items": false, "/v1/count_tokens": false,
	} {
		require.Equal(t, want, provider.CountsTokens(path), path)
	}
}

func TestResponseID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "resp_1", provider.ResponseID([]byte(`{"id":"resp_1","object":"response","status":"completed"}`)))
	require.Empty(t, provider.ResponseID([]byte(`{"id":"chatcmpl_1","object":"chat.completion"}`)))
	require.Empty(t, provider.ResponseID([]byte(`{"error":{}}`)))
	require.Empty(t, provider.ResponseID([]byte(`not json`)))
}

func TestEstimateServiceTier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    llm.Protocol
		e    provider.Endpoint
		body string
		want string
		bad  bool
	}{
		{"chat flex", llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}`, "flex", false},
		{"chat escaped", llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","service_tier":"fl\u0065x","messages":[{"role":"user","content":"hi"}]}`, "flex", false},
		{"chat null", llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","service_tier":null,"messages":[{"role":"user","content":"hi"}]}`, "", false},
		{"chat not a string", llm.OpenAI, provider.EndpointChat, `{"model":"gpt-4.1","service_tier":1,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"anthropic", llm.Anthropic, provider.EndpointChat, `{"model":"claude-haiku-4-5","max_tokens":10,"service_tier":"standard_only","messages":[{"role":"user","content":"hi"}]}`, "standard_only", false},
		{"responses priority", llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","service_tier":"priority","input":"hi"}`, "priority", false},
		{"responses absent", llm.OpenAI, provider.EndpointResponses, `{"model":"gpt-4.1","input":"hi"}`, "", false},
	}
	for _, tt := range tests {
		c, err := provider.EstimateFor(tt.p, tt.e, []byte(tt.body), nil)
		if tt.bad {
			require.ErrorIs(t, err, provider.ErrInvalidRequest, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, c.ServiceTier, tt.name)
	}
}
