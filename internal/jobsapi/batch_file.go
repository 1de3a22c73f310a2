package jobsapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// MaxCustomIDLen bounds a batch line's custom_id.
const MaxCustomIDLen = 512

// BatchLine is one valid request of a batch file.
type BatchLine struct {
	// Line is the 1-based line number in the file.
	Line int
	// CustomID names the request in the results.
	CustomID string
	// Body is the provider request body (Anthropic params, OpenAI body).
	Body json.RawMessage
	// Path is the provider path it is sent to: an OpenAI line's url (one
	// of the scheduled paths: /v1/chat/completions, /v1/responses,
	// /v1/embeddings); /v1/messages for an Anthropic line.
	Path string
	// refused is why the provider refuses the request, for a Message
	// Batch's request answered as its errored result (message_batches.go);
	// nil for a request to queue.
	refused *provider.RequestError
}

// BatchFile is a parsed batch file.
type BatchFile struct {
	// Format is the shape of the lines: llm.Anthropic for Message
	// Batches lines ({"custom_id","params"}), llm.OpenAI for batch
	// API lines ({"custom_id","method","url","body"}).
	Format llm.Protocol
	// Lines are the valid requests in file order.
	Lines []BatchLine
	// Invalid lists the lines that were rejected, with why.
	Invalid []LineError
}

// batchLineJSON accepts both shapes; which fields are set tells them apart.
type batchLineJSON struct {
	CustomID *string         `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// ParseBatchFile parses a JSONL batch file held in memory; see ParseBatch.
func ParseBatchFile(data []byte, maxLines int) (*BatchFile, error) {
	return ParseBatch(bytes.NewReader(data), maxLines)
}

// Errors ParseBatch answers for a file that is whole but has no request,
// or too many.
var (
	ErrBatchEmpty   = errors.New("batch file has no requests")
	ErrBatchTooMany = errors.New("batch has too many requests")
)

// ErrReadingBatch wraps the error of the reader ParseBatch reads from (a
// body over its size limit, a client gone), as opposed to a file that was
// read whole and is invalid.
var ErrReadingBatch = errors.New("reading batch file")

// batchReadBuffer is the read buffer of ParseBatch: a line that fits is
// parsed where it was read.
const batchReadBuffer = 64 << 10

// ParseBatch parses a JSONL batch file in either provider's shape as it is
// read from r, so that the file itself is never held whole: what it keeps
// is each valid line's request, compacted. Blank lines are ignored; every
// line must have the shape of the first valid one, a unique custom_id and
// a JSON object as its request. More than maxLines requests is an error
// (returned as soon as the line is read); so is a file with no request.
// An error of r is returned wrapped in ErrReadingBatch at once.
func ParseBatch(r io.Reader, maxLines int) (*BatchFile, error) {
	p := batchParser{f: &BatchFile{}, seen: map[string]int{}}
	br := bufio.NewReaderSize(r, batchReadBuffer)
	for n := 1; ; n++ {
		line, err := p.readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %w", ErrReadingBatch, err)
		}
		if raw := bytes.TrimSpace(line); len(raw) > 0 {
			p.add(n, raw)
			if len(p.f.Lines) > maxLines {
				return nil, fmt.Errorf("%w: more than %d", ErrBatchTooMany, maxLines)
			}
		}
		if err != nil { // io.EOF
			break
		}
	}
	if len(p.f.Lines) == 0 && len(p.f.Invalid) == 0 {
		return nil, ErrBatchEmpty
	}
	return p.f, nil
}

// batchParser is ParseBatch's state: the file so far and buffers reused
// from line to line (a line is read, checked and compacted without
// allocating more than the request it keeps).
type batchParser struct {
	f       *BatchFile
	seen    map[string]int
	long    []byte       // a line longer than the read buffer, assembled
	compact bytes.Buffer // a request compacted
}

// readLine returns the next line, valid until the next call: a slice of
// br's buffer, or of p.long for a line longer than the buffer.
func (p *batchParser) readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	p.long = append(p.long[:0], line...)
	for {
		line, err = br.ReadSlice('\n')
		p.long = append(p.long, line...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return p.long, err
		}
	}
}

// add checks line n and records it as a request or an invalid line.
func (p *batchParser) add(n int, raw []byte) {
	f := p.f
	id, format, path, body, err := p.parseLine(raw)
	if err == nil && f.Format != "" && format != f.Format {
		err = fmt.Errorf("line has the %s batch shape but the file's first line has the %s shape", format, f.Format)
	}
	if err == nil {
		if first, dup := p.seen[id]; dup {
			err = fmt.Errorf("custom_id %q is already used on line %d", id, first)
		}
	}
	if err != nil {
		f.Invalid = append(f.Invalid, LineError{Line: n, CustomID: id, Message: err.Error()})
		return
	}
	if f.Format == "" {
		f.Format = format
	}
	p.seen[id] = n
	f.Lines = append(f.Lines, BatchLine{Line: n, CustomID: id, Body: body, Path: path})
}

// anyValue stands for a field's value when only the names of a line's
// fields are wanted: it copies nothing.
type anyValue struct{}

func (*anyValue) UnmarshalJSON([]byte) error { return nil }

// batchLineFields are the fields a batch line may have.
var batchLineFields = map[string]bool{"custom_id": true, "params": true, "method": true, "url": true, "body": true}

// parseLine decodes one non-blank line. raw is only read: what is kept
// (the id, the request) is copied out of it.
func (p *batchParser) parseLine(raw []byte) (id string, format llm.Protocol, path string, body json.RawMessage, err error) {
	var l batchLineJSON
	if err := json.Unmarshal(raw, &l); err != nil {
		return "", "", "", nil, fmt.Errorf("not a JSON batch line: %w", err)
	}
	var fields map[string]anyValue
	if err := json.Unmarshal(raw, &fields); err != nil {
		return "", "", "", nil, fmt.Errorf("not a JSON batch line: %w", err)
	}
	for name := range fields {
		if !batchLineFields[name] {
			return "", "", "", nil, fmt.Errorf("not a JSON batch line: unknown field %q", name)
		}
	}
	if l.CustomID != nil {
		id = *l.CustomID
	}
	switch {
	case l.CustomID == nil || id == "":
		return id, "", "", nil, errors.New("custom_id is required")
	case len(id) > MaxCustomIDLen:
		return "", "", "", nil, fmt.Errorf("custom_id longer than %d bytes", MaxCustomIDLen)
	}
	switch {
	case l.Params != nil && l.Body == nil && l.Method == "" && l.URL == "":
		format, path, body = llm.Anthropic, pathFor(llm.Anthropic), l.Params
	case l.Body != nil && l.Params == nil:
		format, body = llm.OpenAI, l.Body
		if l.Method != "POST" {
			return id, "", "", nil, fmt.Errorf("method must be POST, got %q", l.Method)
		}
		if !slices.Contains(frontdoor.ScheduledPaths(llm.OpenAI), l.URL) {
			return id, "", "", nil, fmt.Errorf("url must be one of %s, got %q", strings.Join(frontdoor.ScheduledPaths(llm.OpenAI), ", "), l.URL)
		}
		path = l.URL
	default:
		return id, "", "", nil, errors.New(`want {"custom_id","params"} (Anthropic) or {"custom_id","method","url","body"} (OpenAI)`)
	}
	if len(body) == 0 || body[0] != '{' {
		return id, "", "", nil, errors.New("the request must be a JSON object")
	}
	var probe struct {
		Stream *bool `json:"stream"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return id, "", "", nil, fmt.Errorf("the request: %w", err)
	}
	if probe.Stream != nil && *probe.Stream {
		return id, "", "", nil, errors.New("batch requests cannot stream: remove \"stream\": true")
	}
	// body is the decoder's own copy of the request: kept as it is when
	// it is already compact, else replaced by its compact form.
	p.compact.Reset()
	if err := json.Compact(&p.compact, body); err != nil {
		return id, "", "", nil, fmt.Errorf("the request: %w", err)
	}
	if p.compact.Len() != len(body) {
		body = bytes.Clone(p.compact.Bytes())
	}
	return id, format, path, body, nil
}

// ResultLine renders a finished job as one line of a batch results file in
// the provider's results shape: Anthropic {"custom_id","result":{"type":
// succeeded|errored|canceled|expired,…}}, OpenAI {"id","custom_id",
// "response":{"status_code","request_id","body"},"error"}. It reports false
// for a job still queued or running.
func ResultLine(format llm.Protocol, j JobView) ([]byte, bool) {
	var v any
	switch format {
	case llm.OpenAI:
		v = openAIResult(j)
	default:
		v = anthropicResult(j)
	}
	if v == nil {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return b, true
}

func anthropicResult(j JobView) any {
	type result struct {
		Type    string `json:"type"`
		Message any    `json:"message,omitempty"`
		Error   any    `json:"error,omitempty"`
	}
	r := result{}
	switch j.State {
	case "succeeded":
		r.Type = "succeeded"
		if j.Response != nil {
			r.Message = j.Response.Body
		}
	case "canceled":
		r.Type = "canceled"
	case "dead":
		if j.Error != nil && j.Error.Type == "expired" {
			r.Type = "expired"
			break
		}
		r.Type = "errored"
		r.Error = errorEnvelope(j)
	default:
		return nil
	}
	return struct {
		CustomID string `json:"custom_id"`
		Result   result `json:"result"`
	}{j.CustomID, r}
}

// errorEnvelope is the provider's own error body when it sent one, else
// one in Anthropic's shape.
func errorEnvelope(j JobView) any {
	if j.Error == nil {
		return map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": "the request failed"}}
	}
	if _, text := j.Error.Body.(string); j.Error.Body != nil && !text {
		return j.Error.Body // the provider's JSON error body
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": j.Error.Type, "message": j.Error.Message}}
}

func openAIResult(j JobView) any {
	type response struct {
		StatusCode int    `json:"status_code"`
		RequestID  string `json:"request_id"`
		Body       any    `json:"body"`
	}
	type failure struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	out := struct {
		ID       string    `json:"id"`
		CustomID string    `json:"custom_id"`
		Response *response `json:"response"`
		Error    *failure  `json:"error"`
	}{ID: "batch_req_" + formatID(j.ID), CustomID: j.CustomID}
	switch j.State {
	case "succeeded":
		if j.Response != nil {
			out.Response = &response{StatusCode: j.Response.Status, RequestID: j.Response.Headers["X-Request-Id"], Body: j.Response.Body}
		}
	case "canceled":
		out.Error = &failure{Code: "batch_cancelled", Message: "the request was canceled"}
	case "dead":
		switch {
		case j.Error == nil:
			out.Error = &failure{Code: "api_error", Message: "the request failed"}
		case j.Error.Type == "expired":
			out.Error = &failure{Code: "batch_expired", Message: j.Error.Message}
		case j.Error.Body != nil && j.Error.Status != 0:
			out.Response = &response{StatusCode: j.Error.Status, Body: j.Error.Body}
		default:
			out.Error = &failure{Code: j.Error.Type, Message: j.Error.Message}
		}
	default:
		return nil
	}
	return out
}
