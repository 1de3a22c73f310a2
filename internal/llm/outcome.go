package llm

import (
	"fmt"
	"time"
)

// OutcomeKind is what one upstream attempt ended in (spec §8.1). It decides
// what the engine does next.
type OutcomeKind int

// Outcome kinds.
const (
	// Success is a 2xx with a complete body or stream.
	Success OutcomeKind = iota
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

var kindNames = [...]string{"success", "rate", "overload", "transient", "quota", "client_error", "stream_fail"}

func (c OutcomeKind) String() string {
	if c < 0 || int(c) >= len(kindNames) {
		return fmt.Sprintf("outcome(%d)", int(c))
	}
	return kindNames[c]
}

// Retryable reports whether an attempt with this outcome may be retried by
// the gateway (StreamFail only before the first forwarded byte).
func (c OutcomeKind) Retryable() bool {
	return c == Rate || c == Overload || c == Transient || c == StreamFail
}

// Outcome is the classification of one upstream attempt.
type Outcome struct {
	Kind   OutcomeKind
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
	// SlowDown marks OpenAI's 503 "Slow Down" (Kind Rate): retry, and cut
	// the upstream's admitted rate, ramping back slowly.
	SlowDown bool
}

// ParseOutcomeKind returns the kind named s (as written by String), or an
// error naming the choices. The job store keeps kinds as text.
func ParseOutcomeKind(s string) (OutcomeKind, error) {
	for i, n := range kindNames {
		if n == s {
			return OutcomeKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome kind %q", s)
}
