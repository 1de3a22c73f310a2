package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// billingCodes are OpenAI (and compatible) error codes and types that mean
// no amount of waiting will help until someone pays or raises a limit.
var billingCodes = map[string]bool{
	"insufficient_quota":                true,
	"credit_balance_exhausted":          true,
	"organization_usage_limit_exceeded": true,
	"project_usage_limit_exceeded":      true,
	"billing_hard_limit_reached":        true,
	"billing_not_active":                true,
	"enforced_spend_limit_reached":      true,
	"billing_error":                     true,
}

// quotaMessages are Anthropic texts (on 400, 402, 403 or 429) that mean a
// spend limit or an empty credit balance.
var quotaMessages = []string{
	"credit balance is too low",
	"specified api usage limits",
	"specified workspace api usage limits",
	"reached your api usage limits",
}

// requestedRE and usedRE read OpenAI's "Limit 10000, Requested 10770" and
// "Used 163084" parts.
var (
	limitRequestedRE = regexp.MustCompile(`Limit (\d+),.*?Requested (\d+)`)
	usedRE           = regexp.MustCompile(`\bUsed \d+`)
)

// Classify turns one upstream response into an Outcome (spec §8.1): a 2xx is
// Success; an error is classified from its body (Anthropic, OpenAI or
// Gemini envelope) and status, an unknown error type or a non-JSON body by
// status alone. The retry hint (RetryHint) and x-should-retry are filled in
// for every non-2xx status; the Class does not look at x-should-retry — the
// engine weighs it.
func Classify(p llm.Protocol, status int, h http.Header, body []byte, now time.Time) llm.Outcome {
	o := llm.Outcome{Status: status}
	if h == nil {
		h = http.Header{}
	}
	o.ShouldRetry = ShouldRetry(h)
	if status >= 200 && status < 300 {
		o.Kind = llm.Success
		return o
	}
	e, _ := parseErrorBody(body)
	o.ErrorType = e.Type
	if o.ErrorType == "" && e.Status != "" {
		o.ErrorType = e.Status
	}
	o.Code = e.Code
	if e.ErrorCode != "" {
		o.Code = e.ErrorCode
	}
	o.Message = e.Message
	o.RetryAfter, o.HasRetryAfter = RetryHint(p, h, body, now)
	o.Kind, o.SlowDown = classifyError(status, e)
	return o
}

// flexUnavailable is the code (and type) of OpenAI's 429 for a flex
// request its capacity cannot serve now.
const flexUnavailable = "resource_unavailable"

func classifyError(status int, e errorBody) (llm.OutcomeKind, bool) {
	if isQuota(status, e) {
		return llm.Quota, false
	}
	switch {
	case status == http.StatusTooManyRequests:
		if e.isGemini() && e.geminiTerminal() {
			return llm.Quota, false
		}
		if requestTooLarge(e.Message) {
			return llm.Quota, false
		}
		if e.Code == flexUnavailable || e.Type == flexUnavailable {
			// OpenAI's Flex processing out of capacity: not the key's
			// quota (no retry-after, nothing charged), so it must not
			// pause the upstream as a rate limit; backed off like an
			// overload.
			return llm.Overload, false
		}
		return llm.Rate, false
	case status == http.StatusServiceUnavailable:
		if strings.Contains(strings.ToLower(e.Message), "slow down") {
			return llm.Rate, true
		}
		return llm.Overload, false
	case status == 529:
		return llm.Overload, false
	case status == http.StatusRequestTimeout, status == http.StatusConflict:
		return llm.Transient, false
	case status >= 500:
		if e.Type == "overloaded_error" {
			return llm.Overload, false
		}
		return llm.Transient, false
	}
	// 400, 401, 402, 403, 404, 413, 422, any other 4xx, and statuses a
	// provider should never answer (1xx, 3xx): terminal, passed through.
	return llm.ClientError, false
}

func isQuota(status int, e errorBody) bool {
	if status < 400 || status >= 500 {
		return false
	}
	if billingCodes[e.Type] || billingCodes[e.Code] || billingCodes[e.ErrorCode] {
		return true
	}
	msg := strings.ToLower(e.Message)
	for _, q := range quotaMessages {
		if strings.Contains(msg, q) {
			return true
		}
	}
	return false
}

// requestTooLarge reports OpenAI's "Request too large" 429: the request
// exceeds the whole bucket and can never succeed.
func requestTooLarge(msg string) bool {
	if strings.HasPrefix(strings.TrimSpace(msg), "Request too large") {
		return true
	}
	if usedRE.MatchString(msg) {
		return false
	}
	m := limitRequestedRE.FindStringSubmatch(msg)
	if m == nil {
		return false
	}
	// Compare as decimal strings: both are plain digit runs, so longer
	// (without leading zeros) is larger.
	limit, req := strings.TrimLeft(m[1], "0"), strings.TrimLeft(m[2], "0")
	if len(req) != len(limit) {
		return len(req) > len(limit)
	}
	return req > limit
}

// ClassifyTransportError classifies an attempt that got no HTTP response.
// context.Canceled (the caller went away) is ClientError, ErrorType
// "canceled": not retried and not held against the upstream. Everything
// else — timeouts (context.DeadlineExceeded, net timeouts), connection
// refused or reset, EOF before the response — is Transient: the engine's
// own deadline decides whether another attempt fits. A nil error is
// Success. Status is always 0.
func ClassifyTransportError(err error) llm.Outcome {
	switch {
	case err == nil:
		return llm.Outcome{Kind: llm.Success}
	case errors.Is(err, context.Canceled):
		return llm.Outcome{Kind: llm.ClientError, ErrorType: "canceled", Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return llm.Outcome{Kind: llm.Transient, ErrorType: "timeout", Message: err.Error()}
	}
	return llm.Outcome{Kind: llm.Transient, ErrorType: "connection_error", Message: err.Error()}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// ClassifyStreamError classifies the JSON of an in-stream error: the data of
// an Anthropic "event: error" ({"type":"error","error":{...}}) or an OpenAI
// "data: {"error":{...}}" frame. The Class is always StreamFail (even for an
// overloaded_error): whether it may be retried depends on whether anything
// was forwarded, which only the engine knows. ErrorType, Code and Message
// come from the frame; a frame that cannot be read gets ErrorType
// "stream_error".
func ClassifyStreamError(p llm.Protocol, data []byte) llm.Outcome {
	o := llm.Outcome{Kind: llm.StreamFail}
	e, ok := parseErrorBody(data)
	if !ok {
		var bare struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    any    `json:"code"`
		}
		// OpenAI Responses API error events are flat: {type:"error", code, message}.
		if json.Unmarshal(data, &bare) == nil && bare.Message != "" {
			o.ErrorType = bare.Type
			o.Message = bare.Message
			if s, ok := bare.Code.(string); ok {
				o.Code = s
			}
			return o
		}
		o.ErrorType = "stream_error"
		o.Message = "unreadable error event in the " + string(p) + " stream"
		return o
	}
	o.ErrorType = e.Type
	if o.ErrorType == "" {
		o.ErrorType = e.Status
	}
	o.Code = e.Code
	if e.ErrorCode != "" {
		o.Code = e.ErrorCode
	}
	o.Message = e.Message
	return o
}

// StreamErrorHealth says what an in-stream error event, as classified by
// ClassifyStreamError, tells about the upstream's health once content has
// reached the client. It is the rule the engine's breaker and adaptive
// concurrency use for a stream that broke after its first content (spec
// §1.6 and §2.5: "during periods of high usage, you may receive an
// overloaded_error, which would normally correspond to an HTTP 529"):
//
//   - overload is true for an overload report: Anthropic overloaded_error,
//     an OpenAI error whose type or code names an overload (overloaded,
//     engine_overloaded, …). It counts as a failure and lowers the
//     concurrency limit, as a 529 answer would.
//   - failed is true for an overload or a server-side error: Anthropic
//     api_error, OpenAI server_error. It counts against the breaker, as a
//     500 answer would.
//   - anything else (a rate limit, an invalid request, an unreadable event)
//     is no evidence that the upstream is unhealthy: neither.
//
// A stream that ends without its final event and without an error event (a
// connection reset or EOF after content, a client that went away) is no
// evidence either; the engine does not ask StreamErrorHealth about it.
func StreamErrorHealth(p llm.Protocol, o llm.Outcome) (failed, overload bool) {
	typ, code := strings.ToLower(o.ErrorType), strings.ToLower(o.Code)
	if strings.Contains(typ, "overloaded") || strings.Contains(code, "overloaded") {
		return true, true
	}
	if p == llm.OpenAI {
		return typ == "server_error", false
	}
	return typ == "api_error", false
}
