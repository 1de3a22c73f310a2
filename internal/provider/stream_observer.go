package provider

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/sluicehq/sluice/internal/llm"
)

// StreamObserver watches a streamed response as its bytes pass to the
// client: it is an io.Writer to put beside the client in an io.MultiWriter
// or to call from the relay loop. It frames the SSE stream and records the
// usage, the first in-stream error, whether model output has been seen and
// whether the stream completed. It never alters or blocks the bytes.
//
// Anthropic: usage is message_start's usage, then each message_delta's
// cumulative usage replaces output_tokens (and input/cache counts when it
// carries them). OpenAI chat completions: the last chunk with a non-null
// usage (the final include_usage chunk), with the chunk's service_tier.
// OpenAI Responses (EndpointResponses, or any OpenAI stream whose events
// are named response.* or error): the usage and service_tier of the
// response in response.completed, response.incomplete or response.failed.
// Unknown events are ignored.
//
// Methods are safe for concurrent use (the relay writes while the engine
// may ask Content).
type StreamObserver struct {
	p llm.Protocol
	// responses is set for a Responses API stream (named events).
	responses bool

	mu       sync.Mutex
	parser   SSEParser
	usage    llm.Usage
	hasUsage bool
	err      llm.Outcome
	hasErr   bool
	content  bool
	done     bool
	events   int
	// responseID is the Responses stream's response id (response.created).
	responseID string
}

// NewStreamObserver returns an observer for a stream of protocol p's chat
// endpoint (an OpenAI stream of named response.* events is read as a
// Responses stream all the same).
func NewStreamObserver(p llm.Protocol) *StreamObserver {
	return &StreamObserver{p: p}
}

// NewStreamObserverFor returns an observer for a stream of endpoint e on
// protocol p.
func NewStreamObserverFor(p llm.Protocol, e Endpoint) *StreamObserver {
	return &StreamObserver{p: p, responses: p == llm.OpenAI && e == EndpointResponses}
}

// Write observes b. It always returns len(b), nil.
func (o *StreamObserver) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.parser.feed(b, o.handle)
	return len(b), nil
}

// Usage returns the usage the stream has reported so far, and whether it
// reported any.
func (o *StreamObserver) Usage() (llm.Usage, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.usage, o.hasUsage
}

// StreamError returns the first in-stream error event (Class StreamFail),
// and whether there was one.
func (o *StreamObserver) StreamError() (llm.Outcome, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err, o.hasErr
}

// Content reports whether an event carrying model output has been seen
// (Anthropic content_block_start/delta/stop or message_delta; OpenAI a chunk
// with choices; Responses any response.* event but response.created,
// response.queued and response.in_progress). message_start, ping and
// errors are not content: until Content is true, a retry is still
// invisible to a client that has only been sent those.
func (o *StreamObserver) Content() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.content
}

// Done reports whether the stream completed (Anthropic message_stop,
// OpenAI data: [DONE], Responses response.completed or
// response.incomplete). A stream that ends without it was truncated (or,
// for Responses, failed: response.failed is a StreamError).
func (o *StreamObserver) Done() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

// ResponseID returns the id of the response a Responses stream announced
// in its first event (response.created), or "" before it or on any other
// stream.
func (o *StreamObserver) ResponseID() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.responseID
}

// Events returns how many SSE events have been dispatched.
func (o *StreamObserver) Events() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.events
}

var doneMarker = []byte("[DONE]")

func (o *StreamObserver) handle(event, data []byte) {
	o.events++
	if o.p == llm.OpenAI {
		if o.responses || isResponsesEvent(event) {
			o.handleResponses(event, data)
			return
		}
		o.handleOpenAI(data)
		return
	}
	o.handleAnthropic(event, data)
}

func (o *StreamObserver) handleAnthropic(event, data []byte) {
	name := string(event) // the switch below compares without allocating
	if len(event) == 0 {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &t) != nil {
			return
		}
		name = t.Type
	}
	switch name {
	case "content_block_start", "content_block_delta", "content_block_stop":
		o.content = true
	case "message_start":
		var m struct {
			Message struct {
				Usage *wireUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &m) == nil && m.Message.Usage != nil {
			o.mergeAnthropic(m.Message.Usage.counts(), true)
		}
	case "message_delta":
		o.content = true
		var m struct {
			Usage *wireUsage `json:"usage"`
		}
		if json.Unmarshal(data, &m) == nil && m.Usage != nil {
			o.mergeAnthropic(m.Usage.counts(), false)
		}
	case "message_stop":
		o.done = true
	case "error":
		o.recordError(data)
	}
}

// mergeAnthropic applies a usage object: message_start sets every count;
// message_delta's counts are cumulative, so each one present replaces.
func (o *StreamObserver) mergeAnthropic(c usageCounts, start bool) {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = count(v)
		} else if start {
			*dst = 0
		}
	}
	set(&o.usage.InputTokens, c.input)
	set(&o.usage.OutputTokens, c.output)
	set(&o.usage.CacheCreationInputTokens, c.cacheCreation)
	set(&o.usage.CacheReadInputTokens, c.cacheRead)
	set(&o.usage.CacheCreation5mInputTokens, c.split5m)
	set(&o.usage.CacheCreation1hInputTokens, c.split1h)
	set(&o.usage.ReasoningTokens, c.thinking)
	if c.tier != "" || start {
		o.usage.ServiceTier = c.tier
	}
	o.hasUsage = true
}

func (o *StreamObserver) handleOpenAI(data []byte) {
	if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		o.done = true
		return
	}
	if choices, errSpan, u, hasUsage, ok := scanOpenAIChunk(data); ok {
		if errSpan.end != 0 {
			o.recordError(data)
			return
		}
		if choices {
			o.content = true
		}
		if hasUsage {
			o.usage, o.hasUsage = u, true
		}
		return
	}
	o.handleOpenAIReference(data)
}

// handleOpenAIReference is handleOpenAI by encoding/json: the definition
// scanOpenAIChunk reproduces, and its fallback.
func (o *StreamObserver) handleOpenAIReference(data []byte) {
	var c struct {
		Choices     []struct{}      `json:"choices"`
		Usage       json.RawMessage `json:"usage"`
		Error       json.RawMessage `json:"error"`
		ServiceTier json.RawMessage `json:"service_tier"`
	}
	if json.Unmarshal(data, &c) != nil {
		return
	}
	if len(c.Error) > 0 && !isNull(c.Error) {
		o.recordError(data)
		return
	}
	if len(c.Choices) > 0 {
		o.content = true
	}
	if u, ok := usageFrom(llm.OpenAI, c.Usage); ok {
		if u.ServiceTier == "" {
			u.ServiceTier = lenient[string](c.ServiceTier)
		}
		o.usage, o.hasUsage = u, true
	}
}

func (o *StreamObserver) recordError(data []byte) {
	if o.hasErr {
		return
	}
	o.err, o.hasErr = ClassifyStreamError(o.p, data), true
}
