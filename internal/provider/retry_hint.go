package provider

import (
	"encoding/json"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// MaxRetryHint caps every server-provided wait. A larger hint (a date far
// in the future, "retry-after: 99999999") is clamped to it: the engine then
// decides whether the request's deadline allows waiting at all.
const MaxRetryHint = 10 * time.Minute

// ParseRetryAfter reads the server's wait hint from the response headers,
// in the SDKs' order: retry-after-ms (milliseconds, decimal allowed), then
// retry-after as delay-seconds (integer, or decimal as a lenient extension),
// then retry-after as an HTTP-date in any of RFC 9110's three formats,
// measured from the response's Date header when it has one (to cancel clock
// skew) and from now otherwise. A date in the past gives 0 with ok true.
// Negative, NaN, infinite or unparseable values are ignored (ok false).
// Results are clamped to MaxRetryHint.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(ms) && !math.IsInf(ms, 0) && ms >= 0 {
			return clampHint(ms / 1000), true
		}
	}
	v := strings.TrimSpace(h.Get("retry-after"))
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		return clampHint(secs), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	base := now
	if d, err := http.ParseTime(h.Get("date")); err == nil {
		base = d
	}
	wait := t.Sub(base)
	if wait < 0 {
		return 0, true
	}
	return min(wait, MaxRetryHint), true
}

// isDecimal reports whether v is 1*DIGIT or *DIGIT "." 1*DIGIT.
func isDecimal(v string) bool {
	digits, dot := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
			digits = 0
			if i == len(v)-1 {
				return false
			}
		default:
			return false
		}
	}
	return digits > 0
}

// clampHint converts seconds to a Duration in [0, MaxRetryHint] without
// overflowing.
func clampHint(secs float64) time.Duration {
	if secs <= 0 {
		return 0
	}
	if secs >= MaxRetryHint.Seconds() {
		return MaxRetryHint
	}
	return time.Duration(secs * float64(time.Second))
}

// tryAgainRE finds OpenAI's "Please try again in 7.62s" (also "20s",
// "1m2.5s", "123ms") and Gemini's "Please retry in 29.943570175s".
var tryAgainRE = regexp.MustCompile(`(?i)(?:try again|retry) in ((?:\d+(?:\.\d+)?(?:ms|us|µs|ns|h|m|s))+)`)

// RetryHint returns the wait the provider asked for: the headers first (see
// ParseRetryAfter), then the error body — OpenAI's "Please try again in
// 7.62s" message, then Gemini's RetryInfo.retryDelay and its "Please retry
// in 29.94s" message; when Gemini gives both, the longer one is used, as
// retrying before either has passed fails again. Results are clamped to
// MaxRetryHint.
func RetryHint(p llm.Protocol, h http.Header, body []byte, now time.Time) (time.Duration, bool) {
	if d, ok := ParseRetryAfter(h, now); ok {
		return d, true
	}
	e, ok := parseErrorBody(body)
	if !ok {
		return 0, false
	}
	fromMsg, msgOK := messageHint(e.Message)
	fromInfo, infoOK := e.retryDelay()
	switch {
	case msgOK && infoOK:
		return max(fromMsg, fromInfo), true
	case msgOK:
		return fromMsg, true
	case infoOK:
		return fromInfo, true
	}
	return 0, false
}

func messageHint(msg string) (time.Duration, bool) {
	m := tryAgainRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	return parseHintDuration(m[1])
}

// parseHintDuration parses a Go/proto3 duration string ("29s", "1.5s",
// "1m2.5s"), clamped to [0, MaxRetryHint].
func parseHintDuration(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if strings.HasSuffix(s, "s") && isDecimal(strings.TrimSuffix(s, "s")) {
			// Too large for a Duration: far beyond the cap anyway.
			return MaxRetryHint, true
		}
		return 0, false
	}
	if d < 0 {
		return 0, false
	}
	return min(d, MaxRetryHint), true
}

// ShouldRetry returns the x-should-retry header ("true" or "false",
// case-insensitive), or nil when it is absent or anything else.
func ShouldRetry(h http.Header) *bool {
	var v bool
	switch strings.ToLower(strings.TrimSpace(h.Get("x-should-retry"))) {
	case "true":
		v = true
	case "false":
		v = false
	default:
		return nil
	}
	return &v
}

// errorBody is the union of the three error envelopes: Anthropic
// {"type":"error","error":{type,message,details{error_code}}}, OpenAI
// {"error":{message,type,param,code}} and Gemini google.rpc.Status
// {"error":{code,message,status,details[]}}.
type errorBody struct {
	Type    string
	Message string
	Code    string
	Status  string
	// ErrorCode is Anthropic's error.details.error_code.
	ErrorCode string
	// Details is Gemini's details array.
	Details []geminiDetail
}

type geminiDetail struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
	Violations []struct {
		QuotaID    string `json:"quotaId"`
		QuotaValue string `json:"quotaValue"`
	} `json:"violations"`
}

// parseErrorBody reads any of the envelopes leniently. It reports false
// when the body is not JSON with an "error" member.
func parseErrorBody(body []byte) (errorBody, bool) {
	var top struct {
		Error json.RawMessage `json:"error"`
	}
	if len(body) == 0 || json.Unmarshal(body, &top) != nil || len(top.Error) == 0 || isNull(top.Error) {
		return errorBody{}, false
	}
	var out errorBody
	var msg string
	if json.Unmarshal(top.Error, &msg) == nil {
		// Some gateways send {"error":"text"}.
		out.Message = msg
		return out, true
	}
	var e struct {
		Type    json.RawMessage `json:"type"`
		Message json.RawMessage `json:"message"`
		Code    json.RawMessage `json:"code"`
		Status  json.RawMessage `json:"status"`
		Details json.RawMessage `json:"details"`
	}
	if json.Unmarshal(top.Error, &e) != nil {
		return errorBody{}, false
	}
	out.Type = scalarString(e.Type)
	out.Message = scalarString(e.Message)
	// Gemini's numeric "code" only repeats the HTTP status; its status
	// string (RESOURCE_EXHAUSTED) is kept in Status instead.
	_ = json.Unmarshal(e.Code, &out.Code)
	out.Status = scalarString(e.Status)
	var ad struct {
		ErrorCode json.RawMessage `json:"error_code"`
	}
	if json.Unmarshal(e.Details, &ad) == nil {
		out.ErrorCode = scalarString(ad.ErrorCode)
	}
	var gd []json.RawMessage
	if json.Unmarshal(e.Details, &gd) == nil {
		for _, raw := range gd {
			var d geminiDetail
			if json.Unmarshal(raw, &d) == nil {
				out.Details = append(out.Details, d)
			}
		}
	}
	return out, true
}

// scalarString returns a JSON string's value, a number's text, or "".
func scalarString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func (e errorBody) retryDelay() (time.Duration, bool) {
	for _, d := range e.Details {
		if strings.HasSuffix(d.Type, "google.rpc.RetryInfo") && d.RetryDelay != "" {
			return parseHintDuration(d.RetryDelay)
		}
	}
	return 0, false
}

// geminiTerminal reports a Gemini quota that waiting retryDelay will not
// fix: a per-day quota, or a quota of 0 (no entitlement).
func (e errorBody) geminiTerminal() bool {
	for _, d := range e.Details {
		for _, v := range d.Violations {
			if strings.Contains(v.QuotaID, "PerDay") || strings.TrimSpace(v.QuotaValue) == "0" {
				return true
			}
		}
	}
	return false
}

func (e errorBody) isGemini() bool {
	if e.Status == "RESOURCE_EXHAUSTED" {
		return true
	}
	for _, d := range e.Details {
		if strings.HasSuffix(d.Type, "google.rpc.QuotaFailure") || strings.HasSuffix(d.Type, "google.rpc.RetryInfo") {
			return true
		}
	}
	return false
}
