package jobsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// APIError is the JSON error every job API route answers with, shaped like
// the Anthropic envelope: {"type":"error","error":{"type","message"}}.
type APIError struct {
	Type  string      `json:"type"`
	Error ErrorDetail `json:"error"`
	// RequestID is the answer's X-Sluice-Request-Id, as on the proxy's
	// errors, so a report can be matched with the gateway's log.
	RequestID string `json:"request_id,omitempty"`
}

// ErrorDetail is the inside of an APIError.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Lines lists the invalid lines of a rejected batch.
	Lines []LineError `json:"lines,omitempty"`
}

// LineError is one invalid line of a batch file.
type LineError struct {
	Line     int    `json:"line"`
	CustomID string `json:"custom_id,omitempty"`
	Message  string `json:"message"`
}

func errorType(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusMethodNotAllowed:
		return "invalid_request_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"type":"error","error":{"type":"api_error","message":"encoding the response failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeAPIError(w, status, ErrorDetail{Message: fmt.Sprintf(format, args...)})
}

// writeAPIError answers with the jobs API's envelope through the front
// door's renderer (frontdoor.WriteEnvelope: content-type,
// content-length, x-should-retry: false). An empty d.Type is the type for
// status.
func writeAPIError(w http.ResponseWriter, status int, d ErrorDetail) {
	WriteAPIError(w, frontdoor.Problem{Status: status, Type: d.Type, Message: d.Message}, d.Lines)
}

// WriteAPIError writes pr in the jobs API's envelope, with lines as the
// invalid lines of a rejected batch (nil for none). The gateway uses it for
// the errors it answers on the jobs routes itself. The answer carries a
// request id (RequestID) as X-Sluice-Request-Id and request_id.
func WriteAPIError(w http.ResponseWriter, pr frontdoor.Problem, lines []LineError) {
	if pr.Type == "" {
		pr.Type = errorType(pr.Status)
	}
	reqID := RequestID(w)
	b, err := json.Marshal(APIError{Type: "error", Error: ErrorDetail{Type: pr.Type, Message: pr.Message, Lines: lines}, RequestID: reqID})
	if err != nil {
		pr = frontdoor.Problem{Status: http.StatusInternalServerError}
		b = []byte(`{"type":"error","error":{"type":"api_error","message":"encoding the response failed"},"request_id":"` + reqID + `"}`)
	}
	frontdoor.WriteEnvelope(w, pr, append(b, '\n'))
}

// RequestID returns the request id of the answer w is writing: the
// X-Sluice-Request-Id already set on it (the gateway sets one before the
// handler on some routes), else a new one (frontdoor.NewRequestID), set
// there.
func RequestID(w http.ResponseWriter) string {
	if id := w.Header().Get(frontdoor.HeaderRequestID); id != "" {
		return id
	}
	id := frontdoor.NewRequestID()
	w.Header().Set(frontdoor.HeaderRequestID, id)
	return id
}

// readBody reads at most limit bytes; a larger body is errTooLarge. A body
// of known length is read into a buffer of exactly that size (no growth
// copies).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	if r.ContentLength >= 0 {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reading request body: %w", err)
		}
		return b, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errTooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("reading request body: %w", err)
	}
	return b, nil
}

var errTooLarge = errors.New("request body too large")

// bodyError answers a readBody or readBatch failure: 413 for a body over
// its cap, the reader's own Problem, else 400.
func bodyError(w http.ResponseWriter, err error, limit int64) {
	// The gateway's body readers refuse with their own answer (a 503 when
	// its request-bytes budget has no room).
	if pe, ok := errors.AsType[interface {
		error
		Problem() frontdoor.Problem
	}](err); ok {
		WriteAPIError(w, pe.Problem(), nil)
		return
	}
	if errors.Is(err, errTooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", limit)
		return
	}
	writeError(w, http.StatusBadRequest, "%v", err)
}

// StoreRetryAfter is the retry-after a client gets while the job store is
// unavailable.
const StoreRetryAfter = 5 * time.Second

// storeError answers a store failure. A store that cannot answer
// (jobstore.ErrUnavailable: unreachable, full, read-only) is an outage: 503
// with retry-after and a message without the driver's detail, which goes
// to the log. Anything else is a 500, also logged.
func (a *API) storeError(w http.ResponseWriter, what string, err error) {
	// ErrNotFound and friends are answered by callers that expect them.
	if errors.Is(err, jobstore.ErrUnavailable) {
		a.cfg.Logger.Warn("job store unavailable", "doing", what, "request_id", RequestID(w), "err", err)
		WriteAPIError(w, frontdoor.Problem{Status: http.StatusServiceUnavailable, Type: "overloaded_error",
			Message: what + ": the job store is unavailable; retry later", RetryAfter: StoreRetryAfter, ShouldRetry: true}, nil)
		return
	}
	a.cfg.Logger.Error("job store failed", "doing", what, "request_id", RequestID(w), "err", err)
	writeError(w, http.StatusInternalServerError, "%s: the job store failed", what)
}

// decodeBody reads a body of at most limit bytes into v as exactly one JSON
// value with no unknown fields and nothing after it. On failure it writes
// the error (413 or 400, naming what was wanted) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, want string) bool {
	raw, err := readBody(w, r, limit)
	if err != nil {
		bodyError(w, err, limit)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "body must be %s: %v", want, err)
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "body must be %s, with nothing after it", want)
		return false
	}
	return true
}
