package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	type want struct {
		class     llm.OutcomeKind
		errType   string
		code      string
		retry     time.Duration
		hasRetry  bool
		slowDown  bool
		msgPrefix string
	}
	tests := []struct {
		name   string
		p      llm.Protocol
		status int
		h      http.Header
		body   string
		want   want
	}{
		{"anthropic 200", llm.Anthropic, 200, nil, anthropicMessage, want{class: llm.Success}},
		{"openai 200", llm.OpenAI, 200, nil, openAICompletion, want{class: llm.Success}},
		{"anthropic 429 with retry-after", llm.Anthropic, 429, headers("retry-after", "11"), anthropic429,
			want{class: llm.Rate, errType: "rate_limit_error", retry: 11 * time.Second, hasRetry: true, msgPrefix: "This request would exceed"}},
		{"anthropic 429 without hint is still rate", llm.Anthropic, 429, headers("x-should-retry", "true"), anthropic429,
			want{class: llm.Rate, errType: "rate_limit_error", msgPrefix: "This request would exceed"}},
		{"openai flex unavailable is an overload, not a rate limit", llm.OpenAI, 429, nil,
			`{"error":{"message":"Flex processing is temporarily unavailable","type":"resource_unavailable","param":null,"code":"resource_unavailable"}}`,
			want{class: llm.Overload, errType: "resource_unavailable", code: "resource_unavailable", msgPrefix: "Flex processing"}},
		{"anthropic spend cap", llm.Anthropic, 429, nil, anthropicSpendCap,
			want{class: llm.Quota, errType: "rate_limit_error", code: "enforced_spend_limit_reached", msgPrefix: "You have reached your API usage limits"}},
		{"anthropic credit balance", llm.Anthropic, 400, nil, anthropicCredit,
			want{class: llm.Quota, errType: "invalid_request_error", msgPrefix: "Your credit balance is too low"}},
		{"anthropic usage limits", llm.Anthropic, 400, nil, anthropicUsageCap,
			want{class: llm.Quota, errType: "invalid_request_error", msgPrefix: "You have reached your specified API usage limits"}},
		{"anthropic workspace usage limits", llm.Anthropic, 400, nil, anthropicWSCap,
			want{class: llm.Quota, errType: "invalid_request_error", msgPrefix: "You have reached your specified workspace"}},
		{"anthropic billing_error", llm.Anthropic, 402, nil, `{"type":"error","error":{"type":"billing_error","message":"Payment failed"}}`,
			want{class: llm.Quota, errType: "billing_error", msgPrefix: "Payment failed"}},
		{"anthropic prompt too long", llm.Anthropic, 400, nil, anthropicTooLong,
			want{class: llm.ClientError, errType: "invalid_request_error", msgPrefix: "prompt is too long"}},
		{"anthropic 401", llm.Anthropic, 401, nil, anthropic401, want{class: llm.ClientError, errType: "authentication_error", msgPrefix: "invalid x-api-key"}},
		{"anthropic 404", llm.Anthropic, 404, nil, anthropic404, want{class: llm.ClientError, errType: "not_found_error", msgPrefix: "The requested"}},
		{"anthropic 529", llm.Anthropic, 529, nil, anthropic529, want{class: llm.Overload, errType: "overloaded_error", msgPrefix: "Overloaded"}},
		{"anthropic 529 details null", llm.Anthropic, 529, headers("retry-after", "3"), anthropic529Detail,
			want{class: llm.Overload, errType: "overloaded_error", retry: 3 * time.Second, hasRetry: true, msgPrefix: "Overloaded"}},
		{"anthropic 500", llm.Anthropic, 500, nil, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
			want{class: llm.Transient, errType: "api_error", msgPrefix: "Internal"}},
		{"anthropic 504", llm.Anthropic, 504, nil, `{"type":"error","error":{"type":"timeout_error","message":"Request timed out"}}`,
			want{class: llm.Transient, errType: "timeout_error", msgPrefix: "Request timed out"}},
		{"overloaded_error on a 500", llm.Anthropic, 500, nil, anthropic529, want{class: llm.Overload, errType: "overloaded_error", msgPrefix: "Overloaded"}},
		{"anthropic 409", llm.Anthropic, 409, nil, `{"type":"error","error":{"type":"conflict_error","message":"conflict"}}`,
			want{class: llm.Transient, errType: "conflict_error", msgPrefix: "conflict"}},
		{"408", llm.OpenAI, 408, nil, ``, want{class: llm.Transient}},
		{"html 502", llm.Anthropic, 502, headers("server", "cloudflare"), html502, want{class: llm.Transient}},
		{"html 503 is overload", llm.Anthropic, 503, nil, html502, want{class: llm.Overload}},
		{"html 413 from cloudflare", llm.Anthropic, 413, nil, "<html>413 Request Entity Too Large</html>", want{class: llm.ClientError}},
		{"unknown type falls back to status", llm.Anthropic, 429, nil, `{"type":"error","error":{"type":"brand_new_error","message":"x"}}`,
			want{class: llm.Rate, errType: "brand_new_error", msgPrefix: "x"}},
		{"unknown 4xx", llm.Anthropic, 418, nil, `{"type":"error","error":{"type":"teapot","message":"x"}}`,
			want{class: llm.ClientError, errType: "teapot", msgPrefix: "x"}},
		{"unknown 5xx", llm.OpenAI, 599, nil, `oops`, want{class: llm.Transient}},
		{"422", llm.OpenAI, 422, nil, `{}`, want{class: llm.ClientError}},
		{"redirect passes through", llm.OpenAI, 302, nil, ``, want{class: llm.ClientError}},
		{"openai 429 TPM", llm.OpenAI, 429, nil, openAI429TPM,
			want{class: llm.Rate, errType: "tokens", code: "rate_limit_exceeded", retry: 7620 * time.Millisecond, hasRetry: true, msgPrefix: "Rate limit reached"}},
		{"openai 429 RPM", llm.OpenAI, 429, nil, openAI429RPM,
			want{class: llm.Rate, errType: "requests", code: "rate_limit_exceeded", retry: 20 * time.Second, hasRetry: true, msgPrefix: "Rate limit reached"}},
		{"openai request too large", llm.OpenAI, 429, nil, openAITooBig,
			want{class: llm.Quota, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "Request too large"}},
		{"requested over limit without used", llm.OpenAI, 429, nil, `{"error":{"message":"on tokens per min (TPM): Limit 9000, Requested 10000.","type":"tokens","code":"rate_limit_exceeded"}}`,
			want{class: llm.Quota, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "on tokens"}},
		{"requested under limit without used", llm.OpenAI, 429, nil, `{"error":{"message":"Limit 10000, Requested 900.","type":"tokens","code":"rate_limit_exceeded"}}`,
			want{class: llm.Rate, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "Limit"}},
		{"openai insufficient_quota", llm.OpenAI, 429, nil, openAIQuota,
			want{class: llm.Quota, errType: "insufficient_quota", code: "insufficient_quota", msgPrefix: "You exceeded your current quota"}},
		{"openai credit exhausted", llm.OpenAI, 429, nil, openAICredit,
			want{class: llm.Quota, errType: "insufficient_quota", code: "credit_balance_exhausted", msgPrefix: "You have no credits"}},
		{"openai org usage limit", llm.OpenAI, 429, nil, openAIOrgCap,
			want{class: llm.Quota, errType: "invalid_request_error", code: "organization_usage_limit_exceeded", msgPrefix: "Organization usage"}},
		{"openai slow down", llm.OpenAI, 503, nil, openAISlow,
			want{class: llm.Rate, errType: "server_error", slowDown: true, msgPrefix: "Slow Down"}},
		{"openai 503 overloaded", llm.OpenAI, 503, nil, openAI503, want{class: llm.Overload, errType: "server_error", msgPrefix: "The engine"}},
		{"openai 500", llm.OpenAI, 500, nil, openAI500, want{class: llm.Transient, errType: "server_error", msgPrefix: "The server had"}},
		{"openai context length", llm.OpenAI, 400, nil, openAIContext,
			want{class: llm.ClientError, errType: "invalid_request_error", code: "context_length_exceeded", msgPrefix: "This model's"}},
		{"gateway rate_limit_error", llm.OpenAI, 429, headers("retry-after-ms", "1500"), gatewayRate,
			want{class: llm.Rate, errType: "rate_limit_error", retry: 1500 * time.Millisecond, hasRetry: true, msgPrefix: "Too many"}},
		{"gateway string error", llm.OpenAI, 429, nil, `{"error":"slow please"}`, want{class: llm.Rate, msgPrefix: "slow please"}},
		{"gemini 429 per minute", llm.OpenAI, 429, nil, gemini429,
			want{class: llm.Rate, errType: "RESOURCE_EXHAUSTED", retry: 29943570175, hasRetry: true, msgPrefix: "You exceeded your current quota"}},
		{"gemini 429 per day", llm.OpenAI, 429, nil, gemini429Day,
			want{class: llm.Quota, errType: "RESOURCE_EXHAUSTED", retry: 1500 * time.Millisecond, hasRetry: true, msgPrefix: "Quota exceeded"}},
		{"gemini 429 zero quota", llm.OpenAI, 429, nil, gemini429Zero,
			want{class: llm.Quota, errType: "RESOURCE_EXHAUSTED", msgPrefix: "Quota exceeded"}},
		{"gemini 503", llm.OpenAI, 503, nil, gemini503, want{class: llm.Overload, errType: "UNAVAILABLE", msgPrefix: "The model is overloaded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.Classify(tt.p, tt.status, tt.h, []byte(tt.body), specNow)
			require.Equal(t, tt.want.class, got.Kind, "class %s", got.Kind)
			require.Equal(t, tt.status, got.Status)
			require.Equal(t, tt.want.errType, got.ErrorType)
			require.Equal(t, tt.want.code, got.Code)
			require.Equal(t, tt.want.retry, got.RetryAfter)
			require.Equal(t, tt.want.hasRetry, got.HasRetryAfter)
			require.Equal(t, tt.want.slowDown, got.SlowDown)
			require.True(t, len(got.Message) >= len(tt.want.msgPrefix) && got.Message[:len(tt.want.msgPrefix)] == tt.want.msgPrefix, "message %q", got.Message)
		})
	}
}

func TestClassifyShouldRetryHeader(t *testing.T) {
	t.Parallel()
	got := provider.Classify(llm.Anthropic, 429, headers("x-should-retry", "false"), []byte(anthropicSpendCap), specNow)
	require.Equal(t, llm.Quota, got.Kind)
	require.NotNil(t, got.ShouldRetry)
	require.False(t, *got.ShouldRetry)
	got = provider.Classify(llm.Anthropic, 529, headers(), []byte(anthropic529), specNow)
	require.Nil(t, got.ShouldRetry)
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestClassifyTransportError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		class   llm.OutcomeKind
		errType string
	}{
		{"nil", nil, llm.Success, ""},
		{"canceled", fmt.Errorf("doing request: %w", context.Canceled), llm.ClientError, "canceled"},
		{"deadline", fmt.Errorf("doing request: %w", context.DeadlineExceeded), llm.Transient, "timeout"},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutError{}}, llm.Transient, "timeout"},
		{"os deadline", os.ErrDeadlineExceeded, llm.Transient, "timeout"},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, llm.Transient, "connection_error"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, llm.Transient, "connection_error"},
		{"EOF before response", fmt.Errorf("reading response: %w", io.ErrUnexpectedEOF), llm.Transient, "connection_error"},
		{"plain EOF", io.EOF, llm.Transient, "connection_error"},
		{"other", errors.New("tls: bad certificate"), llm.Transient, "connection_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.ClassifyTransportError(tt.err)
			require.Equal(t, tt.class, got.Kind)
			require.Equal(t, tt.errType, got.ErrorType)
			require.Zero(t, got.Status)
			if tt.err != nil {
				require.Equal(t, tt.err.Error(), got.Message)
			}
		})
	}
}

func TestClassifyStreamError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		p       llm.Protocol
		data    string
		errType string
		code    string
		msg     string
	}{
		{"anthropic overloaded", llm.Anthropic, `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`, "overloaded_error", "", "Overloaded"},
		{"anthropic api_error", llm.Anthropic, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, "api_error", "", "Internal server error"},
		{"openai server_error", llm.OpenAI, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`, "server_error", "", "The server had an error while processing your request."},
		{"openai responses flat error", llm.OpenAI, `{"type":"error","code":"rate_limit_exceeded","message":"TPM exceeded","param":null,"sequence_number":3}`, "error", "rate_limit_exceeded", "TPM exceeded"},
		{"unreadable", llm.Anthropic, `not json`, "stream_error", "", "unreadable error event in the anthropic stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.ClassifyStreamError(tt.p, []byte(tt.data))
			require.Equal(t, llm.StreamFail, got.Kind)
			require.Equal(t, tt.errType, got.ErrorType)
			require.Equal(t, tt.code, got.Code)
			require.Equal(t, tt.msg, got.Message)
		})
	}
}

func TestStreamErrorHealth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		p                llm.Protocol
		data             string
		failed, overload bool
	}{
		{"anthropic overloaded_error", llm.Anthropic, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true, true},
		{"anthropic api_error", llm.Anthropic, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, true, false},
		{"anthropic rate_limit_error", llm.Anthropic, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, false, false},
		{"anthropic invalid_request_error", llm.Anthropic, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, false, false},
		{"anthropic unreadable", llm.Anthropic, `not json`, false, false},
		{"openai server_error", llm.OpenAI, `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, true, false},
		{"openai overloaded code", llm.OpenAI, `{"error":{"message":"overloaded","type":"server_error","param":null,"code":"overloaded"}}`, true, true},
		{"openai engine_overloaded type", llm.OpenAI, `{"error":{"message":"That model is currently overloaded","type":"engine_overloaded","param":null,"code":null}}`, true, true},
		{"openai rate limit", llm.OpenAI, `{"type":"error","code":"rate_limit_exceeded","message":"TPM exceeded","param":null,"sequence_number":3}`, false, false},
		{"openai invalid_request_error", llm.OpenAI, `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}`, false, false},
		{"openai unreadable", llm.OpenAI, `{"error":`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			failed, overload := provider.StreamErrorHealth(tt.p, provider.ClassifyStreamError(tt.p, []byte(tt.data)))
			require.Equal(t, tt.failed, failed, "failed")
			require.Equal(t, tt.overload, overload, "overload")
		})
	}
}

func FuzzClassify(f *testing.F) {
	seeds := []struct {
		status int
		body   string
	}{
		{429, anthropic429}, {429, anthropicSpendCap}, {529, anthropic529}, {400, anthropicCredit},
		{429, openAI429TPM}, {429, openAITooBig}, {429, openAIQuota}, {503, openAISlow},
		{429, gemini429}, {429, gemini429Day}, {502, html502}, {200, anthropicMessage},
		{429, `{"error":{"details":{"error_code":5},"message":["x"]}}`},
	}
	for _, s := range seeds {
		f.Add(s.status, "11", []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		h := http.Header{}
		h.Set("retry-after", retryAfter)
		for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
			o := provider.Classify(p, status, h, body, specNow)
			require.Equal(t, status, o.Status)
			require.GreaterOrEqual(t, o.Kind, llm.Success)
			require.LessOrEqual(t, o.Kind, llm.ClientError, "Classify never returns StreamFail")
			require.Equal(t, status >= 200 && status < 300, o.Kind == llm.Success)
			require.GreaterOrEqual(t, o.RetryAfter, time.Duration(0))
			require.LessOrEqual(t, o.RetryAfter, provider.MaxRetryHint)
			require.Equal(t, o.SlowDown, o.SlowDown && o.Kind == llm.Rate)
			s := provider.ClassifyStreamError(p, body)
			require.Equal(t, llm.StreamFail, s.Kind)
		}
	})
}
