package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// maxInspectedEvent bounds how much of one SSE event the stripper holds
// before passing it on uninspected.
const maxInspectedEvent = 1 << 20

// UsageStripper relays an OpenAI chat-completions SSE stream and drops the
// final usage chunk ({"choices":[],"usage":{...}}) that Sluice asked for on
// the client's behalf (EnsureStreamUsage), so a client that did not ask for
// it never sees a chunk with empty choices. The engine below it has already
// read the usage to reconcile the quota. Every other byte passes through
// unchanged, one whole event per Read batch so streaming stays live.
type UsageStripper struct {
	src     *bufio.Reader
	event   []byte // the event being assembled
	pending []byte // bytes ready for the caller
	err     error  // the source's terminal error, returned once pending drains
}

// NewUsageStripper returns a UsageStripper reading the stream from r.
func NewUsageStripper(r io.Reader) *UsageStripper {
	return &UsageStripper{src: bufio.NewReader(r)}
}

func (s *UsageStripper) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.fill()
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// fill reads lines until one event is complete (or the source ends) and
// moves it to pending unless it is the usage chunk.
func (s *UsageStripper) fill() {
	for {
		line, err := s.src.ReadSlice('\n')
		s.event = append(s.event, line...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(s.event) > maxInspectedEvent {
				s.emit(false)
				return
			}
			continue
		case err != nil:
			s.emit(false)
			s.err = err
			return
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 { // blank line: event ends
			s.emit(true)
			return
		}
	}
}

func (s *UsageStripper) emit(complete bool) {
	if !complete || !isUsageOnlyChunk(s.event) {
		s.pending = append(s.pending[:0], s.event...)
	}
	s.event = s.event[:0]
}

// isUsageOnlyChunk reports whether an SSE event is a chat-completion chunk
// with an empty choices array and a usage object.
func isUsageOnlyChunk(event []byte) bool {
	if !bytes.Contains(event, []byte(`"usage"`)) {
		return false
	}
	var data []byte
	for line := range bytes.Lines(event) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
		}
	}
	var chunk struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) != nil {
		return false
	}
	return chunk.Choices != nil && len(chunk.Choices) == 0 &&
		len(chunk.Usage) > 0 && !bytes.Equal(chunk.Usage, []byte("null"))
}
