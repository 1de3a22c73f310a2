package frontdoor

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Problem is an answer Sluice gives itself instead of the provider's: a
// request it refused, or a request the engine gave up on.
type Problem struct {
	// Status is the HTTP status; outside 400–599 it is answered 503.
	Status int
	// Type is the error type; empty means the protocol's type for Status
	// (provider.ErrorTypeFor).
	Type string
	// Message explains what happened, for the client.
	Message string
	// RetryAfter is the hint sent as retry-after and retry-after-ms; zero
	// sends neither.
	RetryAfter time.Duration
	// ShouldRetry is sent as x-should-retry. It is false unless set: Sluice
	// has already done whatever retrying was worth doing.
	ShouldRetry bool
	// QueueWait and Attempts are sent as x-sluice-queue-ms and
	// x-sluice-attempts.
	QueueWait time.Duration
	Attempts  int
}

// StoppedRetryAfter is the retry-after of the 503 that answers a request
// the gateway refused because it is shutting down (dispatch.ErrStopped).
const StoppedRetryAfter = time.Second

// ProblemFor returns the Problem for a request error (*provider.RequestError)
// or an engine give-up (*dispatch.Error), and false for any other error.
func ProblemFor(err error) (Problem, bool) {
	if de, ok := errors.AsType[*dispatch.Error](err); ok {
		msg := de.Message
		if msg == "" && de.Reason != nil {
			msg = de.Reason.Error()
		}
		pr := Problem{Status: de.Status, Type: de.Type, Message: msg, RetryAfter: de.RetryAfter,
			QueueWait: de.QueueWait, Attempts: de.Attempts}
		if errors.Is(de, dispatch.ErrStopped) {
			// The gateway is shutting down and nothing was sent: another
			// instance, or this one restarted, can take it at once.
			pr.Status, pr.RetryAfter, pr.ShouldRetry = http.StatusServiceUnavailable, StoppedRetryAfter, true
		}
		return pr, true
	}
	if re, ok := errors.AsType[*provider.RequestError](err); ok {
		return Problem{Status: re.Status, Type: re.Type, Message: re.Message}, true
	}
	return Problem{}, false
}

// RequestIDHeader is the response header that carries the request id in
// protocol p: Anthropic's request-id, OpenAI's x-request-id.
func RequestIDHeader(p llm.Protocol) string {
	if p == llm.OpenAI {
		return "X-Request-Id"
	}
	return "Request-Id"
}

// NewRequestID returns an id for an answer Sluice gives itself.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "req_sluice_" + hex.EncodeToString(b[:])
}

// Render returns pr as protocol p's own error (provider.ErrorBody), so SDKs
// raise their usual exception: the status, the headers (content-type,
// content-length, retry-after and retry-after-ms when there is a hint,
// x-should-retry, the protocol's request id header, x-sluice-request-id,
// x-sluice-queue-ms and x-sluice-attempts) and the body.
func Render(p llm.Protocol, reqID string, pr Problem) (int, http.Header, []byte) {
	status := pr.status()
	typ := pr.Type
	if typ == "" {
		typ = provider.ErrorTypeFor(p, status)
	}
	h := pr.header()
	h.Set(RequestIDHeader(p), reqID)
	h.Set(HeaderRequestID, reqID)
	SetSluiceHeaders(h, pr.QueueWait, pr.Attempts)
	body := provider.ErrorBody(p, status, typ, pr.Message, reqID)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return status, h, body
}

func (pr Problem) status() int {
	if pr.Status < 400 || pr.Status > 599 {
		return http.StatusServiceUnavailable
	}
	return pr.Status
}

// header holds what every rendered error carries, whatever its body.
func (pr Problem) header() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	SetRetryAfter(h, pr.RetryAfter)
	h.Set(HeaderShouldRetry, strconv.FormatBool(pr.ShouldRetry))
	return h
}

// WriteProblem writes pr to w in protocol p's error shape (see Render).
// Headers already set on w are kept unless Render sets them.
func WriteProblem(w http.ResponseWriter, p llm.Protocol, reqID string, pr Problem) {
	status, h, body := Render(p, reqID, pr)
	write(w, status, h, body)
}

// WriteEnvelope writes an error whose body the caller shaped itself (the
// jobs API's envelope) with the same headers as Render, minus the request
// id and Sluice's engine headers: content-type, content-length,
// retry-after, retry-after-ms and x-should-retry.
func WriteEnvelope(w http.ResponseWriter, pr Problem, body []byte) {
	h := pr.header()
	h.Set("Content-Length", strconv.Itoa(len(body)))
	write(w, pr.status(), h, body)
}

func write(w http.ResponseWriter, status int, h http.Header, body []byte) {
	out := w.Header()
	for k, vs := range h {
		out[k] = vs
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ProblemResponse returns pr as the *http.Response a provider would have
// sent (see Render), for an http.RoundTripper.
func ProblemResponse(req *http.Request, p llm.Protocol, reqID string, pr Problem) *http.Response {
	status, h, body := Render(p, reqID, pr)
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
