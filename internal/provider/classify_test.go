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

	"github.com/sluicehq/sluice/internal/provider"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	type want struct {
		class     provider.Class
		errType   string
		code      string
		retry     time.Duration
		hasRetry  bool
		slowDown  bool
		msgPrefix string
	}
	tests := []struct {
		name   string
		p      provider.Protocol
		status int
		h      http.Header
		body   string
		want   want
	}{
		{"anthropic 200", provider.Anthropic, 200, nil, anthropicMessage, want{class: provider.Success}},
		{"openai 200", provider.OpenAI, 200, nil, openAICompletion, want{class: provider.Success}},
		{"anthropic 429 with retry-after", provider.Anthropic, 429, headers("retry-after", "11"), anthropic429,
			want{class: provider.Rate, errType: "rate_limit_error", retry: 11 * time.Second, hasRetry: true, msgPrefix: "This request would exceed"}},
		{"anthropic 429 without hint is still rate", provider.Anthropic, 429, headers("x-should-retry", "true"), anthropic429,
			want{class: provider.Rate, errType: "rate_limit_error", msgPrefix: "This request would exceed"}},
		{"anthropic spend cap", provider.Anthropic, 429, nil, anthropicSpendCap,
			want{class: provider.Quota, errType: "rate_limit_error", code: "enforced_spend_limit_reached", msgPrefix: "You have reached your API usage limits"}},
		{"anthropic credit balance", provider.Anthropic, 400, nil, anthropicCredit,
			want{class: provider.Quota, errType: "invalid_request_error", msgPrefix: "Your credit balance is too low"}},
		{"anthropic usage limits", provider.Anthropic, 400, nil, anthropicUsageCap,
			want{class: provider.Quota, errType: "invalid_request_error", msgPrefix: "You have reached your specified API usage limits"}},
		{"anthropic workspace usage limits", provider.Anthropic, 400, nil, anthropicWSCap,
			want{class: provider.Quota, errType: "invalid_request_error", msgPrefix: "You have reached your specified workspace"}},
		{"anthropic billing_error", provider.Anthropic, 402, nil, `{"type":"error","error":{"type":"billing_error","message":"Payment failed"}}`,
			want{class: provider.Quota, errType: "billing_error", msgPrefix: "Payment failed"}},
		{"anthropic prompt too long", provider.Anthropic, 400, nil, anthropicTooLong,
			want{class: provider.ClientError, errType: "invalid_request_error", msgPrefix: "prompt is too long"}},
		{"anthropic 401", provider.Anthropic, 401, nil, anthropic401, want{class: provider.ClientError, errType: "authentication_error", msgPrefix: "invalid x-api-key"}},
		{"anthropic 404", provider.Anthropic, 404, nil, anthropic404, want{class: provider.ClientError, errType: "not_found_error", msgPrefix: "The requested"}},
		{"anthropic 529", provider.Anthropic, 529, nil, anthropic529, want{class: provider.Overload, errType: "overloaded_error", msgPrefix: "Overloaded"}},
		{"anthropic 529 details null", provider.Anthropic, 529, headers("retry-after", "3"), anthropic529Detail,
			want{class: provider.Overload, errType: "overloaded_error", retry: 3 * time.Second, hasRetry: true, msgPrefix: "Overloaded"}},
		{"anthropic 500", provider.Anthropic, 500, nil, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`,
			want{class: provider.Transient, errType: "api_error", msgPrefix: "Internal"}},
		{"anthropic 504", provider.Anthropic, 504, nil, `{"type":"error","error":{"type":"timeout_error","message":"Request timed out"}}`,
			want{class: provider.Transient, errType: "timeout_error", msgPrefix: "Request timed out"}},
		{"overloaded_error on a 500", provider.Anthropic, 500, nil, anthropic529, want{class: provider.Overload, errType: "overloaded_error", msgPrefix: "Overloaded"}},
		{"anthropic 409", provider.Anthropic, 409, nil, `{"type":"error","error":{"type":"conflict_error","message":"conflict"}}`,
			want{class: provider.Transient, errType: "conflict_error", msgPrefix: "conflict"}},
		{"408", provider.OpenAI, 408, nil, ``, want{class: provider.Transient}},
		{"html 502", provider.Anthropic, 502, headers("server", "cloudflare"), html502, want{class: provider.Transient}},
		{"html 503 is overload", provider.Anthropic, 503, nil, html502, want{class: provider.Overload}},
		{"html 413 from cloudflare", provider.Anthropic, 413, nil, "<html>413 Request Entity Too Large</html>", want{class: provider.ClientError}},
		{"unknown type falls back to status", provider.Anthropic, 429, nil, `{"type":"error","error":{"type":"brand_new_error","message":"x"}}`,
			want{class: provider.Rate, errType: "brand_new_error", msgPrefix: "x"}},
		{"unknown 4xx", provider.Anthropic, 418, nil, `{"type":"error","error":{"type":"teapot","message":"x"}}`,
			want{class: provider.ClientError, errType: "teapot", msgPrefix: "x"}},
		{"unknown 5xx", provider.OpenAI, 599, nil, `oops`, want{class: provider.Transient}},
		{"422", provider.OpenAI, 422, nil, `{}`, want{class: provider.ClientError}},
		{"redirect passes through", provider.OpenAI, 302, nil, ``, want{class: provider.ClientError}},
		{"openai 429 TPM", provider.OpenAI, 429, nil, openAI429TPM,
			want{class: provider.Rate, errType: "tokens", code: "rate_limit_exceeded", retry: 7620 * time.Millisecond, hasRetry: true, msgPrefix: "Rate limit reached"}},
		{"openai 429 RPM", provider.OpenAI, 429, nil, openAI429RPM,
			want{class: provider.Rate, errType: "requests", code: "rate_limit_exceeded", retry: 20 * time.Second, hasRetry: true, msgPrefix: "Rate limit reached"}},
		{"openai request too large", provider.OpenAI, 429, nil, openAITooBig,
			want{class: provider.Quota, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "Request too large"}},
		{"requested over limit without used", provider.OpenAI, 429, nil, `{"error":{"message":"on tokens per min (TPM): Limit 9000, Requested 10000.","type":"tokens","code":"rate_limit_exceeded"}}`,
			want{class: provider.Quota, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "on tokens"}},
		{"requested under limit without used", provider.OpenAI, 429, nil, `{"error":{"message":"Limit 10000, Requested 900.","type":"tokens","code":"rate_limit_exceeded"}}`,
			want{class: provider.Rate, errType: "tokens", code: "rate_limit_exceeded", msgPrefix: "Limit"}},
		{"openai insufficient_quota", provider.OpenAI, 429, nil, openAIQuota,
			want{class: provider.Quota, errType: "insufficient_quota", code: "insufficient_quota", msgPrefix: "You exceeded your current quota"}},
		{"openai credit exhausted", provider.OpenAI, 429, nil, openAICredit,
			want{class: provider.Quota, errType: "insufficient_quota", code: "credit_balance_exhausted", msgPrefix: "You have no credits"}},
		{"openai org usage limit", provider.OpenAI, 429, nil, openAIOrgCap,
			want{class: provider.Quota, errType: "invalid_request_error", code: "organization_usage_limit_exceeded", msgPrefix: "Organization usage"}},
		{"openai slow down", provider.OpenAI, 503, nil, openAISlow,
			want{class: provider.Rate, errType: "server_error", slowDown: true, msgPrefix: "Slow Down"}},
		{"openai 503 overloaded", provider.OpenAI, 503, nil, openAI503, want{class: provider.Overload, errType: "server_error", msgPrefix: "The engine"}},
		{"openai 500", provider.OpenAI, 500, nil, openAI500, want{class: provider.Transient, errType: "server_error", msgPrefix: "The server had"}},
		{"openai context length", provider.OpenAI, 400, nil, openAIContext,
			want{class: provider.ClientError, errType: "invalid_request_error", code: "context_length_exceeded", msgPrefix: "This model's"}},
		{"gateway rate_limit_error", provider.OpenAI, 429, headers("retry-after-ms", "1500"), gatewayRate,
			want{class: provider.Rate, errType: "rate_limit_error", retry: 1500 * time.Millisecond, hasRetry: true, msgPrefix: "Too many"}},
		{"gateway string error", provider.OpenAI, 429, nil, `{"error":"slow please"}`, want{class: provider.Rate, msgPrefix: "slow please"}},
		{"gemini 429 per minute", provider.OpenAI, 429, nil, gemini429,
			want{class: provider.Rate, errType: "RESOURCE_EXHAUSTED", retry: 29943570175, hasRetry: true, msgPrefix: "You exceeded your current quota"}},
		{"gemini 429 per day", provider.OpenAI, 429, nil, gemini429Day,
			want{class: provider.Quota, errType: "RESOURCE_EXHAUSTED", retry: 1500 * time.Millisecond, hasRetry: true, msgPrefix: "Quota exceeded"}},
		{"gemini 429 zero quota", provider.OpenAI, 429, nil, gemini429Zero,
			want{class: provider.Quota, errType: "RESOURCE_EXHAUSTED", msgPrefix: "Quota exceeded"}},
		{"gemini 503", provider.OpenAI, 503, nil, gemini503, want{class: provider.Overload, errType: "UNAVAILABLE", msgPrefix: "The model is overloaded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.Classify(tt.p, tt.status, tt.h, []byte(tt.body), specNow)
			require.Equal(t, tt.want.class, got.Class, "class %s", got.Class)
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
	got := provider.Classify(provider.Anthropic, 429, headers("x-should-retry", "false"), []byte(anthropicSpendCap), specNow)
	require.Equal(t, provider.Quota, got.Class)
	require.NotNil(t, got.ShouldRetry)
	require.False(t, *got.ShouldRetry)
	got = provider.Classify(provider.Anthropic, 529, headers(), []byte(anthropic529), specNow)
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
		class   provider.Class
		errType string
	}{
		{"nil", nil, provider.Success, ""},
		{"canceled", fmt.Errorf("doing request: %w", context.Canceled), provider.ClientError, "canceled"},
		{"deadline", fmt.Errorf("doing request: %w", context.DeadlineExceeded), provider.Transient, "timeout"},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutError{}}, provider.Transient, "timeout"},
		{"os deadline", os.ErrDeadlineExceeded, provider.Transient, "timeout"},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, provider.Transient, "connection_error"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, provider.Transient, "connection_error"},
		{"EOF before response", fmt.Errorf("reading response: %w", io.ErrUnexpectedEOF), provider.Transient, "connection_error"},
		{"plain EOF", io.EOF, provider.Transient, "connection_error"},
		{"other", errors.New("tls: bad certificate"), provider.Transient, "connection_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.ClassifyTransportError(tt.err)
			require.Equal(t, tt.class, got.Class)
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
		p       provider.Protocol
		data    string
		errType string
		code    string
		msg     string
	}{
		{"anthropic overloaded", provider.Anthropic, `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`, "overloaded_error", "", "Overloaded"},
		{"anthropic api_error", provider.Anthropic, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, "api_error", "", "Internal server error"},
		{"openai server_error", provider.OpenAI, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`, "server_error", "", "The server had an error while processing your request."},
		{"openai responses flat error", provider.OpenAI, `{"type":"error","code":"rate_limit_exceeded","message":"TPM exceeded","param":null,"sequence_number":3}`, "error", "rate_limit_exceeded", "TPM exceeded"},
		{"unreadable", provider.Anthropic, `not json`, "stream_error", "", "unreadable error event in the anthropic stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := provider.ClassifyStreamError(tt.p, []byte(tt.data))
			require.Equal(t, provider.StreamFail, got.Class)
			require.Equal(t, tt.errType, got.ErrorType)
			require.Equal(t, tt.code, got.Code)
			require.Equal(t, tt.msg, got.Message)
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
		for _, p := range []provider.Protocol{provider.Anthropic, provider.OpenAI} {
			o := provider.Classify(p, status, h, body, specNow)
			require.Equal(t, status, o.Status)
			require.GreaterOrEqual(t, o.Class, provider.Success)
			require.LessOrEqual(t, o.Class, provider.ClientError, "Classify never returns StreamFail")
			require.Equal(t, status >= 200 && status < 300, o.Class == provider.Success)
			require.GreaterOrEqual(t, o.RetryAfter, time.Duration(0))
			require.LessOrEqual(t, o.RetryAfter, provider.MaxRetryHint)
			require.Equal(t, o.SlowDown, o.SlowDown && o.Class == provider.Rate)
			s := provider.ClassifyStreamError(p, body)
			require.Equal(t, provider.StreamFail, s.Class)
		}
	})
}
