package provider

import (
	"bytes"
	"net/http"
	"strings"
)

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	// Event is the event: field, empty when the event had none (OpenAI
	// streams; the SSE spec calls that type "message").
	Event string
	// Data is the data: lines joined with "\n".
	Data []byte
	// ID is the last event ID seen so far in the stream (it persists across
	// events, as the SSE spec says).
	ID string
}

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// SSEParser frames a text/event-stream incrementally, following the WHATWG
// SSE parsing rules: bytes may arrive in any chunking; lines end in LF, CRLF
// or CR (a CRLF split across two chunks counts once); lines starting with
// ":" are comments; "field: value" loses one leading space; data lines are
// joined with "\n"; an event is dispatched on a blank line and only when it
// has data; a UTF-8 BOM at the very start is ignored; an event cut off
// before its blank line is never dispatched. Unknown fields (and "retry")
// are ignored.
//
// The zero value is ready to use. A parser is not safe for concurrent use.
// It copies only the bytes of lines split across chunks, so steady-state
// parsing does not allocate beyond the events it returns.
type SSEParser struct {
	line    []byte // partial line carried over from the previous Feed
	event   []byte // event type buffer
	data    []byte // data buffer (each line followed by '\n')
	id      string // last event ID
	started bool   // the first line has been seen (BOM check done)
	skipLF  bool   // the previous chunk ended in CR: drop a leading LF

	// lastName is the last event name Feed returned, so that a stream's
	// repeated names share one string instead of allocating each time.
	lastName string
}

// Feed parses the next chunk of the stream and returns the events it
// completed, in order (nil when none). The returned events own their data:
// they stay valid after later calls.
func (p *SSEParser) Feed(b []byte) []SSEEvent {
	var (
		out   []SSEEvent
		arena []byte
		ends  []int
	)
	p.feed(b, func(event, data []byte) {
		name := p.lastName
		if string(event) != name {
			name = string(event)
			p.lastName = name
		}
		arena = append(arena, data...)
		ends = append(ends, len(arena))
		out = append(out, SSEEvent{Event: name, ID: p.id})
	})
	start := 0
	for i := range out {
		out[i].Data = arena[start:ends[i]:ends[i]]
		start = ends[i]
	}
	return out
}

// Pending reports whether the parser holds an incomplete line or an event
// not yet dispatched (the stream, if it ended now, would be truncated).
func (p *SSEParser) Pending() bool {
	return len(p.line) > 0 || len(p.data) > 0 || len(p.event) > 0
}

// feed parses b and calls fn for each dispatched event. event and data are
// only valid during the call.
func (p *SSEParser) feed(b []byte, fn func(event, data []byte)) {
	nl, cr := -2, -2 // positions of the next LF / CR at or after pos; -1 none
	pos := 0
	for pos < len(b) {
		if p.skipLF {
			p.skipLF = false
			if b[pos] == '\n' {
				pos++
				continue
			}
		}
		if nl != -1 && nl < pos {
			nl = indexFrom(b, pos, '\n')
		}
		if cr != -1 && cr < pos {
			cr = indexFrom(b, pos, '\r')
		}
		end := nl
		if cr >= 0 && (end < 0 || cr < end) {
			end = cr
		}
		if end < 0 {
			p.line = append(p.line, b[pos:]...)
			return
		}
		line := b[pos:end]
		if len(p.line) > 0 {
			p.line = append(p.line, line...)
			line = p.line
		}
		p.processLine(line, fn)
		p.line = p.line[:0]
		pos = end + 1
		if b[end] == '\r' {
			if pos < len(b) {
				if b[pos] == '\n' {
					pos++
				}
			} else {
				p.skipLF = true
			}
		}
	}
}

func indexFrom(b []byte, from int, c byte) int {
	i := bytes.IndexByte(b[from:], c)
	if i < 0 {
		return -1
	}
	return from + i
}

func (p *SSEParser) processLine(line []byte, fn func(event, data []byte)) {
	if !p.started {
		p.started = true
		line = bytes.TrimPrefix(line, utf8BOM)
	}
	if len(line) == 0 {
		if len(p.data) > 0 {
			fn(p.event, p.data[:len(p.data)-1])
		}
		p.data = p.data[:0]
		p.event = p.event[:0]
		return
	}
	if line[0] == ':' {
		return
	}
	field, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		p.data = append(p.data, value...)
		p.data = append(p.data, '\n')
	case "event":
		p.event = append(p.event[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 && string(value) != p.id {
			p.id = string(value)
		}
	}
}

// IsEventStream reports whether a response's Content-Type is an SSE stream
// (text/event-stream, any case, any parameters).
func IsEventStream(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Get("Content-Type"))), "text/event-stream")
}
