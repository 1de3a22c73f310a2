package provider

import (
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/internal/llm"
)

// ResponseState is what an OpenAI Response object (the body of POST or GET
// /v1/responses) says about its progress: a background response is created
// queued and polled until it is terminal.
type ResponseState struct {
	// ID is the response's id (resp_…).
	ID string
	// Status is queued, in_progress, completed, incomplete, failed or
	// cancelled.
	Status string
	// Background reports a response created with background: true.
	Background bool
	// IncompleteReason is incomplete_details.reason (max_output_tokens,
	// content_filter, …) of an incomplete response.
	IncompleteReason string
	// ErrorCode and ErrorMessage are a failed response's error.
	ErrorCode    string
	ErrorMessage string
	// Usage is the response's usage, valid when HasUsage (terminal
	// responses report it; queued and in-progress ones do not).
	Usage    llm.Usage
	HasUsage bool
}

// Terminal reports whether the response will not change any more.
func (s ResponseState) Terminal() bool {
	switch s.Status {
	case "completed", "incomplete", "failed", "cancelled":
		return true
	}
	return false
}

// ParseResponseState reads a Response object. It fails on a body that is
// not a JSON object with a string id and status (an error envelope, say).
func ParseResponseState(body []byte) (ResponseState, error) {
	var r struct {
		ID                *string `json:"id"`
		Status            *string `json:"status"`
		Background        any     `json:"background"`
		IncompleteDetails any     `json:"incomplete_details"`
		Error             any     `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return ResponseState{}, fmt.Errorf("reading a response object: %w", err)
	}
	if r.ID == nil || r.Status == nil {
		return ResponseState{}, fmt.Errorf("reading a response object: no id or status")
	}
	s := ResponseState{ID: *r.ID, Status: *r.Status}
	s.Background, _ = r.Background.(bool)
	if d, ok := r.IncompleteDetails.(map[string]any); ok {
		s.IncompleteReason, _ = d["reason"].(string)
	}
	if e, ok := r.Error.(map[string]any); ok {
		s.ErrorCode, _ = e["code"].(string)
		s.ErrorMessage, _ = e["message"].(string)
	}
	s.Usage, s.HasUsage = ParseUsage(llm.OpenAI, body)
	return s, nil
}
