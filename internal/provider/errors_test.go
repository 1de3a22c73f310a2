package provider_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestErrorTypeFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    int
		anthropic string
		openai    string
	}{
		{400, "invalid_request_error", "invalid_request_error"},
		{401, "authentication_error", "authentication_error"},
		{402, "billing_error", "invalid_request_error"},
		{403, "permission_error", "permission_error"},
		{404, "not_found_error", "invalid_request_error"},
		{409, "conflict_error", "invalid_request_error"},
		{413, "request_too_large", "invalid_request_error"},
		{422, "invalid_request_error", "invalid_request_error"},
		{429, "rate_limit_error", "rate_limit_error"},
		{500, "api_error", "server_error"},
		{502, "api_error", "server_error"},
		{503, "overloaded_error", "server_error"},
		{504, "timeout_error", "server_error"},
		{529, "overloaded_error", "server_error"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.anthropic, provider.ErrorTypeFor(llm.Anthropic, tt.status), "anthropic %d", tt.status)
		require.Equal(t, tt.openai, provider.ErrorTypeFor(llm.OpenAI, tt.status), "openai %d", tt.status)
	}
}

func TestErrorBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		p         llm.Protocol
		status    int
		errType   string
		msg       string
		requestID string
		want      string
	}{
		{"anthropic 529", llm.Anthropic, 529, "", "Overloaded", "req_01ICfHarEhQMSJqNvS9fBxcw", anthropic529},
		{"anthropic without request id", llm.Anthropic, 429, "rate_limit_error", "slow", "", `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`},
		{"openai 429", llm.OpenAI, 429, "", "queue full <try later>", "req_1", `{"error":{"message":"queue full <try later>","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{"openai quota", llm.OpenAI, 429, "insufficient_quota", "no", "", `{"error":{"message":"no","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`},
		{"openai 500 null code", llm.OpenAI, 500, "", "boom", "", `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`},
		{"openai 400 null code", llm.OpenAI, 400, "", "bad", "", `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.ErrorBody(tt.p, tt.status, tt.errType, tt.msg, tt.requestID)
			require.JSONEq(t, tt.want, string(got))
			// What Sluice writes, Sluice classifies back the same way.
			o := provider.Classify(tt.p, tt.status, nil, got, specNow)
			require.Equal(t, tt.msg, o.Message)
		})
	}
}

func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       llm.Protocol
		errType string
		want    string
		event   string
		outType string
	}{
		{"anthropic", llm.Anthropic, "overloaded_error", `{"type":"error","error":{"type":"overloaded_error","message":"m"}}`, "error", "overloaded_error"},
		{"anthropic default type", llm.Anthropic, "", `{"type":"error","error":{"type":"api_error","message":"m"}}`, "error", "api_error"},
		{"openai", llm.OpenAI, "server_error", `{"error":{"message":"m","type":"server_error","param":null,"code":null}}`, "", "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			frame := provider.StreamErrorEvent(tt.p, tt.errType, "m")
			var p provider.SSEParser
			events := p.Feed(frame)
			require.Len(t, events, 1)
			require.False(t, p.Pending())
			require.Equal(t, tt.event, events[0].Event)
			require.JSONEq(t, tt.want, string(events[0].Data))
			require.True(t, json.Valid(events[0].Data))
			o := provider.NewStreamObserver(tt.p)
			_, _ = o.Write(frame)
			se, ok := o.StreamError()
			require.True(t, ok)
			require.Equal(t, tt.outType, se.ErrorType)
			require.Equal(t, "m", se.Message)
		})
	}
}
