package provider

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sluicehq/sluice/internal/llm"
)

// The Responses API stream: named events whose data repeats the name in
// "type" (spec §2.6). response.created, response.queued and
// response.in_progress announce the response; every other response.* event
// carries output; response.completed and response.incomplete end it with
// the response's usage; response.failed ends it with the response's error
// (and usage so far); an error event is an in-stream error.

// isResponsesEvent reports whether an SSE event name is a Responses API
// event (chat completion streams name none of their events).
func isResponsesEvent(event []byte) bool {
	return bytes.HasPrefix(event, []byte("response.")) || string(event) == "error"
}

func (o *StreamObserver) handleResponses(event, data []byte) {
	name := string(event)
	if name == "" {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &t) != nil {
			return
		}
		name = t.Type
	}
	switch name {
	case "response.created", "response.queued", "response.in_progress":
		if o.responseID == "" {
			o.responseID = eventResponseID(data)
		}
	case "response.completed", "response.incomplete":
		o.responseUsage(data)
		o.done = true
	case "response.failed":
		o.responseUsage(data)
		if !o.hasErr {
			o.err, o.hasErr = classifyResponseFailed(data), true
		}
	case "error":
		o.recordError(data)
	default:
		if strings.HasPrefix(name, "response.") {
			o.content = true
		}
	}
}

// responseUsage records the usage of the response an event carries.
func (o *StreamObserver) responseUsage(data []byte) {
	var ev struct {
		Response json.RawMessage `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil || len(ev.Response) == 0 {
		return
	}
	if u, ok := ParseUsage(llm.OpenAI, ev.Response); ok {
		o.usage, o.hasUsage = u, true
	}
}

// classifyResponseFailed classifies a response.failed event: StreamFail,
// with the response's error code (as ErrorType too, unless the error names
// a type) and message.
func classifyResponseFailed(data []byte) llm.Outcome {
	o := llm.Outcome{Kind: llm.StreamFail}
	var ev struct {
		Response struct {
			Error *struct {
				Code    any    `json:"code"`
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Response.Error == nil {
		o.ErrorType = "stream_error"
		o.Message = "response.failed without a readable error"
		return o
	}
	e := ev.Response.Error
	if c, ok := e.Code.(string); ok {
		o.Code = c
	}
	o.ErrorType = e.Type
	if o.ErrorType == "" {
		o.ErrorType = o.Code
	}
	o.Message = e.Message
	return o
}

// eventResponseID returns the id of the response an event carries.
func eventResponseID(data []byte) string {
	var ev struct {
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return ""
	}
	return ev.Response.ID
}
