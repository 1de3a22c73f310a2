package provider

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrInvalidRequest is matched (errors.Is) by every *RequestError: the
// request body cannot be sent upstream as it is.
var ErrInvalidRequest = errors.New("invalid request")

// RequestError describes a request body the provider would reject. The
// server answers it with Status and an error body of the provider's shape
// (see ErrorBody) without sending anything upstream.
type RequestError struct {
	// Status is the HTTP status to answer with (400).
	Status int
	// Type is the provider error type ("invalid_request_error").
	Type string
	// Message is worded like the provider's own ("max_tokens: Field required").
	Message string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Type)
}

// Is makes errors.Is(err, ErrInvalidRequest) true for every *RequestError.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

func invalidRequest(format string, args ...any) *RequestError {
	return &RequestError{
		Status:  http.StatusBadRequest,
		Type:    "invalid_request_error",
		Message: fmt.Sprintf(format, args...),
	}
}
