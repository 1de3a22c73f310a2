package frontdoor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Messages of the error events Sluice ends a stream with.
const (
	msgStreamShutdown    = "the gateway is shutting down: the stream was cut before its end; retry the request"
	msgStreamInterrupted = "the upstream stream was interrupted before its end; retry the request"
	msgStreamTruncated   = "the upstream stream ended before its final event; retry the request"
)

// maxHeldEvent bounds the bytes of an unfinished SSE event held back
// (streamBody): past it they are passed on, as a provider event is far
// smaller.
const maxHeldEvent = 1 << 20

// streamBody is the body of a 2xx event stream as every front door hands
// it on (PrepareResponse): it ends with a terminal event whoever ends it.
//
//   - The stream ends with its final event (message_stop, [DONE]) or an
//     error event from the upstream: passed on unchanged, then io.EOF.
//   - The caller went away (its context ended for a reason other than the
//     gateway stopping): its read error, quietly; nobody is reading.
//   - Sluice cut the stream (the gateway stopping: dispatch.ErrStopped as
//     the read error or the context's cause) or the upstream broke it off
//     (a reset, a timeout, an EOF without the final event): the protocol's
//     error event (provider.StreamErrorEvent: Anthropic overloaded_error at
//     shutdown, api_error otherwise; OpenAI server_error), then io.EOF, so
//     SDKs raise instead of returning a truncated message.
//
// Bytes after the last complete event are held back until the event is
// complete, so an error event is never glued to half an event.
type streamBody struct {
	ctx  context.Context
	p    llm.Protocol
	body io.ReadCloser
	end  func() (dispatch.End, bool)

	mu      sync.Mutex
	held    []byte // an unfinished event, not passed on yet
	out     []byte // bytes ready for the reader: complete events, then the error event
	ended   bool   // the inner body ended; out is all that is left
	endErr  error  // returned once out is empty: io.EOF or the caller's error
	cut     string // the error event's message, when Sluice added one
	scratch []byte
	unwatch func() bool // stops the caller's context from closing body
}

func newStreamBody(ctx context.Context, p llm.Protocol, body io.ReadCloser, end func() (dispatch.End, bool)) *streamBody {
	s := &streamBody{ctx: ctx, p: p, body: body, end: end}
	// A caller that goes away closes the stream (a Read waiting returns;
	// the engine reads on to the usage the provider bills). A cut by the
	// gateway reaches the engine's call itself and ends with an error
	// event.
	s.unwatch = context.AfterFunc(ctx, func() {
		if !errors.Is(context.Cause(ctx), dispatch.ErrStopped) {
			_ = body.Close()
		}
	})
	return s
}

// Read implements io.Reader.
func (s *streamBody) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		if len(s.out) > 0 {
			n := copy(p, s.out)
			s.out = s.out[n:]
			s.mu.Unlock()
			return n, nil
		}
		if s.ended {
			err := s.endErr
			s.mu.Unlock()
			return 0, err
		}
		if len(s.scratch) < len(p) {
			s.scratch = make([]byte, max(len(p), 4<<10))
		}
		buf := s.scratch[:len(p)]
		s.mu.Unlock()
		// Not under s.mu: Close must be able to abort a blocked Read.
		n, err := s.body.Read(buf)
		s.mu.Lock()
		s.take(buf[:n])
		if err != nil {
			s.finish(err)
		}
		s.mu.Unlock()
	}
}

// take moves the complete events of b (after what is held) to out.
func (s *streamBody) take(b []byte) {
	if len(b) == 0 {
		return
	}
	s.held = append(s.held, b...)
	i := lastEventEnd(s.held)
	if i == 0 && len(s.held) > maxHeldEvent {
		i = len(s.held)
	}
	if i > 0 {
		s.out = append(s.out, s.held[:i]...)
		s.held = append(s.held[:0], s.held[i:]...)
	}
}

// finish decides how the stream ends, once its inner body ended with err.
func (s *streamBody) finish(err error) {
	s.ended = true
	s.endErr = io.EOF
	stopping := errors.Is(err, dispatch.ErrStopped) || errors.Is(context.Cause(s.ctx), dispatch.ErrStopped)
	if !stopping && s.ctx.Err() != nil {
		// The caller went away: stop quietly with its own error.
		s.endErr = context.Cause(s.ctx)
		s.held = nil
		return
	}
	if !stopping && errors.Is(err, io.EOF) {
		if end, ok := s.end(); ok && end.Terminal {
			s.out = append(s.out, s.held...) // trailing bytes after the last event, if any
			s.held = nil
			return
		}
	}
	typ, msg := "", msgStreamInterrupted
	switch {
	case stopping:
		typ, msg = provider.ErrorTypeFor(s.p, http.StatusServiceUnavailable), msgStreamShutdown
	case errors.Is(err, io.EOF):
		msg = msgStreamTruncated
	}
	s.held = nil // half an event is dropped: the error event replaces it
	s.cut = msg
	s.out = append(s.out, provider.StreamErrorEvent(s.p, typ, msg)...)
}

// Close closes the inner body. A Read after Close still ends with the
// stream's terminal event.
func (s *streamBody) Close() error {
	s.unwatch()
	return s.body.Close()
}

// lastEventEnd returns the index just past the last blank line in b (an
// SSE event's end: "\n\n", "\r\n\r\n" or "\r\r"), or 0.
func lastEventEnd(b []byte) int {
	best := 0
	for _, sep := range [][]byte{[]byte("\n\n"), []byte("\r\n\r\n"), []byte("\r\r")} {
		if i := bytes.LastIndex(b, sep); i >= 0 && i+len(sep) > best {
			best = i + len(sep)
		}
	}
	return best
}

// StreamCut returns the message of the error event Sluice ended a
// prepared stream body with, and whether it did (for the caller's log).
func StreamCut(body io.Reader) (string, bool) {
	s, ok := body.(*streamBody)
	if !ok {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut, s.cut != ""
}
