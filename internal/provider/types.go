package provider

import (
	"fmt"
	"time"
)

// Protocol names a provider wire protocol.
type Protocol string

// The protocols Sluice speaks.
const (
	// Anthropic is the Anthropic Messages API (POST /v1/messages).
	Anthropic Protocol = "anthropic"
	// OpenAI is the OpenAI Chat Completions API (POST /v1/chat/completions)
	// and OpenAI-compatible gateways.
	OpenAI Protocol = "openai"
)

// ParseProtocol returns the Protocol named s, or an error naming the choices.
func ParseProtocol(s string) (Protocol, error) {
	switch Protocol(s) {
	case Anthropic, OpenAI:
		return Protocol(s), nil
	}
	return "", fmt.Errorf("unknown protocol %q (want anthropic or openai)", s)
}

// Cost is what a request is expected to take from each quota dimension,
// estimated before it is sent.
type Cost struct {
	// Model is the request's model field.
	Model string
	// InputTokens is the conservative estimate of prompt tokens
	// (system + messages + tools).
	InputTokens int64
	// OutputTokens is the output reservation: max_tokens (or
	// max_completion_tokens) times n.
	OutputTokens int64
	// Stream reports whether the request asked for a streamed response.
	Stream bool
}

// Usage is what a response reports it consumed.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
}

// Class is the outcome class of one upstream attempt (spec §8.1). It decides
// what the engine does next.
type Class int

// Outcome classes.
const (
	// Success is a 2xx with a complete body or stream.
	Success Class = iota
	// Rate is a retryable rate limit: wait for the hint, do not burn an
	// attempt, pause the whole upstream.
	Rate
	// Overload is 529 / 503 overloaded: back off with jitter, feed the
	// breaker and adaptive concurrency.
	Overload
	// Transient is 500, 502, 504, 408, 409, a connection reset before the
	// response, or a timeout: back off with jitter and retry.
	Transient
	// Quota is a terminal billing or spend condition (spend cap,
	// insufficient_quota, credit balance too low, "Request too large").
	// Never retried.
	Quota
	// ClientError is 400, 401, 403, 404, 413, 422: never retried.
	ClientError
	// StreamFail is an error event inside a 2xx stream. Retryable only when
	// nothing was forwarded to the client yet.
	StreamFail
)

var classNames = [...]string{"success", "rate", "overload", "transient", "quota", "client_error", "stream_fail"}

func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return fmt.Sprintf("class(%d)", int(c))
	}
	return classNames[c]
}

// Retryable reports whether an attempt with this outcome may be retried by
// the gateway (StreamFail only before the first forwarded byte).
func (c Class) Retryable() bool {
	return c == Rate || c == Overload || c == Transient || c == StreamFail
}

// Outcome is the classification of one upstream response.
type Outcome struct {
	Class  Class
	Status int
	// ErrorType is the provider's error type (Anthropic error.type, OpenAI
	// error.type), empty when absent.
	ErrorType string
	// Code is OpenAI's error.code or Anthropic's error.details.error_code.
	Code string
	// Message is the provider's error message, empty on success.
	Message string
	// RetryAfter is the server's hint, valid when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// ShouldRetry is the x-should-retry header, nil when absent.
	ShouldRetry *bool
	// SlowDown marks OpenAI's 503 "Slow Down" (Class Rate): retry, and cut
	// the upstream's admitted rate, ramping back slowly.
	SlowDown bool
}

// Dimension names one quota dimension in a rate-limit snapshot.
type Dimension string

// Quota dimensions reported by the providers' rate-limit headers.
const (
	DimRequests     Dimension = "requests"
	DimTokens       Dimension = "tokens"        // combined input+output (OpenAI TPM, Anthropic tokens-*)
	DimInputTokens  Dimension = "input_tokens"  // Anthropic ITPM
	DimOutputTokens Dimension = "output_tokens" // Anthropic OTPM
)

// Bucket is the provider's view of one quota dimension.
type Bucket struct {
	// Limit is the bucket's capacity (per-minute limit); -1 when unknown.
	Limit int64
	// Remaining is the level left; -1 when unknown.
	Remaining int64
	// Reset is the instant the bucket is full again; zero when unknown.
	Reset time.Time
}

// RateLimits is a snapshot of the provider's rate-limit headers, one Bucket
// per dimension the response reported.
type RateLimits map[Dimension]Bucket
