package provider

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/llm"
)

// ErrorTypeFor returns the error type the provider uses for an HTTP status,
// for errors Sluice answers itself.
//
// Anthropic (its documented list): 400 invalid_request_error, 401
// authentication_error, 402 billing_error, 403 permission_error, 404
// not_found_error, 409 conflict_error, 413 request_too_large, 429
// rate_limit_error, 500 api_error, 503 and 529 overloaded_error, 504
// timeout_error; any other 4xx invalid_request_error, any other 5xx
// api_error.
//
// OpenAI: 401 authentication_error, 403 permission_error, 429
// rate_limit_error (with code rate_limit_exceeded, see ErrorBody), 5xx
// server_error, any other status invalid_request_error.
func ErrorTypeFor(p llm.Protocol, status int) string {
	if p == llm.OpenAI {
		switch {
		case status == http.StatusUnauthorized:
			return "authentication_error"
		case status == http.StatusForbidden:
			return "permission_error"
		case status == http.StatusTooManyRequests:
			return "rate_limit_error"
		case status >= 500:
			return "server_error"
		}
		return "invalid_request_error"
	}
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// openAICodeFor picks OpenAI's error.code for a status and type; "" means
// null.
func openAICodeFor(status int, errType string) string {
	switch {
	case errType == "insufficient_quota":
		return "insufficient_quota"
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status == http.StatusUnauthorized:
		return "invalid_api_key"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded"
	case status == http.StatusGatewayTimeout:
		return "timeout"
	}
	return ""
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type anthropicErrorBody struct {
	Type      string               `json:"type"`
	Error     anthropicErrorDetail `json:"error"`
	RequestID string               `json:"request_id,omitempty"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type openAIErrorBody struct {
	Error openAIErrorDetail `json:"error"`
}

// ErrorBody returns a JSON error body in the provider's own shape, so that
// official SDKs raise their usual exceptions:
//
//	Anthropic: {"type":"error","error":{"type":…,"message":…},"request_id":…}
//	OpenAI:    {"error":{"message":…,"type":…,"param":null,"code":…}}
//
// An empty errType means ErrorTypeFor(p, status). Anthropic omits an empty
// requestID; OpenAI has no request_id member (send x-request-id instead).
// OpenAI's code is insufficient_quota, rate_limit_exceeded (429),
// invalid_api_key (401), overloaded (503/529), timeout (504), else null.
func ErrorBody(p llm.Protocol, status int, errType, message string, requestID string) []byte {
	if errType == "" {
		errType = ErrorTypeFor(p, status)
	}
	var v any
	if p == llm.OpenAI {
		d := openAIErrorDetail{Message: message, Type: errType}
		if c := openAICodeFor(status, errType); c != "" {
			d.Code = &c
		}
		v = openAIErrorBody{Error: d}
	} else {
		v = anthropicErrorBody{
			Type:      "error",
			Error:     anthropicErrorDetail{Type: errType, Message: message},
			RequestID: requestID,
		}
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		// Unreachable: the values are plain strings.
		return []byte(`{"error":{"type":"api_error","message":"error body could not be encoded"}}`)
	}
	return b
}

// StreamErrorEvent returns one complete SSE frame reporting an error inside
// a stream that has already answered 200:
//
//	Anthropic: event: error\ndata: {"type":"error","error":{"type":…,"message":…}}\n\n
//	OpenAI:    data: {"error":{"message":…,"type":…,"param":null,"code":null}}\n\n
//
// An empty errType means the protocol's 500 type (api_error, server_error).
func StreamErrorEvent(p llm.Protocol, errType, message string) []byte {
	if errType == "" {
		errType = ErrorTypeFor(p, http.StatusInternalServerError)
	}
	var v any
	prefix := "data: "
	if p == llm.OpenAI {
		v = openAIErrorBody{Error: openAIErrorDetail{Message: message, Type: errType}}
	} else {
		prefix = "event: error\ndata: "
		v = anthropicErrorBody{Type: "error", Error: anthropicErrorDetail{Type: errType, Message: message}}
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		b = []byte(`{"error":{"type":"api_error","message":"error event could not be encoded"}}`)
	}
	out := make([]byte, 0, len(prefix)+len(b)+2)
	out = append(out, prefix...)
	out = append(out, b...)
	return append(out, '\n', '\n')
}
