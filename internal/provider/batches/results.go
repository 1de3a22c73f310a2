package batches

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// ResultType is what became of one request of a batch.
type ResultType string

// Result types (Anthropic's names; OpenAI's lines map onto them).
const (
	// Succeeded: Body is the reply (an Anthropic message; an OpenAI
	// chat completion, response or embedding list) and Usage its usage.
	Succeeded ResultType = "succeeded"
	// Errored: the request failed; Body is the provider's error body when
	// it sent one.
	Errored ResultType = "errored"
	// Canceled: the batch was cancelled before the request ran. Not billed.
	Canceled ResultType = "canceled"
	// Expired: the batch's window ended before the request ran. Not billed.
	Expired ResultType = "expired"
)

// Result is one request's outcome in a batch.
type Result struct {
	// CustomID names the request.
	CustomID string
	// Type is its outcome.
	Type ResultType
	// Status is the HTTP status of the request's answer: 200 for a
	// success, the error's status when the provider gave one (OpenAI's
	// status_code; Anthropic's is inferred from the error type), 0 for
	// canceled and expired requests.
	Status int
	// Body is the reply or error body, as the provider wrote it.
	Body json.RawMessage
	// Usage is the reply's usage (HasUsage false when it reports none):
	// what the provider bills for this request, at batch prices.
	Usage    llm.Usage
	HasUsage bool
	// ErrorType, ErrorCode and ErrorMessage describe a failed request
	// (Anthropic error.type; OpenAI error.type and error.code, or the
	// line's error code, batch_expired or batch_cancelled).
	ErrorType, ErrorCode, ErrorMessage string
	// RequestID is the provider's request id, when given.
	RequestID string
}

// Retryable reports whether the request may succeed if sent again: it
// did not run (canceled, expired) or failed for a reason other than its
// own body (Anthropic: any error but invalid_request_error; OpenAI: a 429
// or a 5xx).
func (r Result) Retryable() bool {
	switch r.Type {
	case Canceled, Expired:
		return true
	case Errored:
		if r.Status != 0 {
			return r.Status == http.StatusTooManyRequests || r.Status >= 500
		}
		return r.ErrorType != "invalid_request_error"
	}
	return false
}

// errResultLine is a results line that cannot be read.
var errResultLine = errors.New("unreadable batch result line")

// ParseResults reads a batch results file in protocol p's shape (Anthropic
// {"custom_id","result":{"type",…}}; OpenAI {"id","custom_id","response",
// "error"}), one JSON object a line, blank lines ignored, and calls fn with
// each result in file order. An unreadable line stops the parse with an
// error naming it; an error from fn stops it and is returned as is.
func ParseResults(p llm.Protocol, r io.Reader, fn func(Result) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading results line %d: %w", n, err)
		}
		if raw := bytes.TrimSpace(line); len(raw) > 0 {
			res, perr := parseResult(p, raw)
			if perr != nil {
				return fmt.Errorf("results line %d: %w: %w", n, errResultLine, perr)
			}
			if ferr := fn(res); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			return nil
		}
	}
}

func parseResult(p llm.Protocol, raw []byte) (Result, error) {
	if p == llm.OpenAI {
		return parseOpenAIResult(raw)
	}
	return parseAnthropicResult(raw)
}

// providerError is the part of an error body both protocols share:
// Anthropic {"type":"error","error":{"type","message"},"request_id"},
// OpenAI {"error":{"type","code","message"}}.
type providerError struct {
	Error *struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

func (r *Result) readError(body json.RawMessage) {
	var e providerError
	if json.Unmarshal(body, &e) != nil || e.Error == nil {
		return
	}
	r.ErrorType, r.ErrorMessage = e.Error.Type, e.Error.Message
	var code string
	if json.Unmarshal(e.Error.Code, &code) == nil {
		r.ErrorCode = code
	}
	if r.RequestID == "" {
		r.RequestID = e.RequestID
	}
}

// anthropicStatus is the HTTP status an Anthropic error type stands for.
var anthropicStatus = map[string]int{"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
	"not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500, "overloaded_error": 529}

func parseAnthropicResult(raw []byte) (Result, error) {
	var l struct {
		CustomID *string `json:"custom_id"`
		Result   *struct {
			Type    ResultType      `json:"type"`
			Message json.RawMessage `json:"message"`
			Error   json.RawMessage `json:"error"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return Result{}, err
	}
	if l.CustomID == nil || *l.CustomID == "" || l.Result == nil {
		return Result{}, errors.New(`want {"custom_id","result"}`)
	}
	r := Result{CustomID: *l.CustomID, Type: l.Result.Type}
	switch r.Type {
	case Succeeded:
		if len(l.Result.Message) == 0 || l.Result.Message[0] != '{' {
			return Result{}, errors.New("a succeeded result without its message")
		}
		r.Status, r.Body = http.StatusOK, l.Result.Message
		r.Usage, r.HasUsage = provider.ParseUsage(llm.Anthropic, r.Body)
	case Errored:
		r.Body = l.Result.Error
		r.readError(r.Body)
		r.Status = anthropicStatus[r.ErrorType]
	case Canceled, Expired:
	default:
		return Result{}, fmt.Errorf("unknown result type %q", r.Type)
	}
	return r, nil
}

func parseOpenAIResult(raw []byte) (Result, error) {
	var l struct {
		CustomID *string `json:"custom_id"`
		Response *struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &l); err != nil {
		return Result{}, err
	}
	if l.CustomID == nil || *l.CustomID == "" {
		return Result{}, errors.New("custom_id is missing")
	}
	r := Result{CustomID: *l.CustomID}
	switch {
	case l.Response != nil && l.Response.StatusCode/100 == 2:
		r.Type, r.Status, r.Body, r.RequestID = Succeeded, l.Response.StatusCode, l.Response.Body, l.Response.RequestID
		r.Usage, r.HasUsage = provider.ParseUsage(llm.OpenAI, r.Body)
	case l.Response != nil:
		r.Type, r.Status, r.Body, r.RequestID = Errored, l.Response.StatusCode, l.Response.Body, l.Response.RequestID
		r.readError(r.Body)
	case l.Error != nil:
		r.ErrorCode, r.ErrorMessage = l.Error.Code, l.Error.Message
		switch l.Error.Code {
		case "batch_expired":
			r.Type = Expired
		case "batch_cancelled":
			r.Type = Canceled
		default:
			r.Type = Errored
		}
	default:
		return Result{}, errors.New("a line with neither response nor error")
	}
	return r, nil
}
