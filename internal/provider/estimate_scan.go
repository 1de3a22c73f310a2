package provider

import (
	"encoding/json"
	"math"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/llm"
)

// scanEstimate is EstimateWith's fast path: one pass over the body with a
// small JSON scanner, no tree and (with ByteCounter) no allocation but the
// model's name. It prices only bodies it is sure about: on anything the
// reference estimator (estimator.run, built on encoding/json) would reject,
// and on the rare shapes whose encoding/json semantics it does not
// reproduce (escaped or case-folded keys, duplicate fields, document
// blocks, very deep nesting), it returns false and the caller falls back
// to the reference. FuzzEstimateMatchesReference holds the two to the same
// answers.
func scanEstimate(p llm.Protocol, body []byte, tc TokenCounter) (Cost, bool) {
	s := scan{p: p, tc: tc, b: body}
	if bc, ok := tc.(ByteCounter); ok {
		s.bpt = int64(bc.BytesPerToken)
		if s.bpt <= 0 {
			s.bpt = BytesPerTokenDefault
		}
	}
	return s.run()
}

// scanMaxDepth bounds nesting; deeper bodies go to the reference.
const scanMaxDepth = 500

type span struct{ start, end int } // a value's bytes, body[start:end]; end 0 when absent

type scan struct {
	p      llm.Protocol
	tc     TokenCounter
	bpt    int64 // ByteCounter's divisor; 0 for another TokenCounter
	b      []byte
	i      int
	depth  int
	tokens int64
	// plainEnd is the end of the last plain string literal lit scanned:
	// its decoded length is its length.
	plainEnd int
}

// Top-level fields the estimate reads.
const (
	fModel = 1 << iota
	fStream
	fMaxTokens
	fMaxCompletionTokens
	fN
	fMessages
	fSystem
	fTools
	fServiceTier
)

func (s *scan) run() (Cost, bool) {
	if !s.open('{') {
		return Cost{}, false
	}
	var seen int
	var model, stream, maxTokens, maxCompletion, n, tier span
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok {
			return Cost{}, false
		}
		if done {
			break
		}
		if !plain { // an escaped key may name a field: leave it to encoding/json
			return Cost{}, false
		}
		var f int
		switch string(key) {
		case "model":
			f = fModel
		case "stream":
			f = fStream
		case "max_tokens":
			f = fMaxTokens
		case "max_completion_tokens":
			f = fMaxCompletionTokens
		case "n":
			f = fN
		case "messages":
			f = fMessages
		case "system":
			f = fSystem
		case "tools":
			f = fTools
		case "service_tier":
			f = fServiceTier
		}
		if f != 0 && seen&f != 0 { // a duplicate: the map keeps the last one
			return Cost{}, false
		}
		seen |= f
		var v span
		switch f {
		case fMessages:
			if !s.messages() {
				return Cost{}, false
			}
			continue
		case fSystem:
			if s.p == llm.Anthropic {
				if !s.content() {
					return Cost{}, false
				}
				continue
			}
		case fTools:
			if !s.tools() {
				return Cost{}, false
			}
			continue
		}
		if v, ok = s.skip(); !ok {
			return Cost{}, false
		}
		switch f {
		case fModel:
			model = v
		case fStream:
			stream = v
		case fMaxTokens:
			maxTokens = v
		case fMaxCompletionTokens:
			maxCompletion = v
		case fN:
			n = v
		case fServiceTier:
			tier = v
		}
	}
	s.ws()
	if s.i != len(s.b) || seen&fMessages == 0 {
		return Cost{}, false
	}
	var c Cost
	if model.end == 0 || s.b[model.start] != '"' || model.end-model.start == 2 {
		return Cost{}, false
	}
	c.Model = s.str(model)
	if c.Model == "" {
		return Cost{}, false
	}
	if stream.end != 0 {
		switch string(s.b[stream.start:stream.end]) {
		case "true":
			c.Stream = true
		case "false", "null":
		default:
			return Cost{}, false
		}
	}
	if tier.end != 0 {
		switch {
		case s.b[tier.start] == '"':
			c.ServiceTier = s.str(tier)
		case string(s.b[tier.start:tier.end]) != "null":
			return Cost{}, false // not a string: the reference names the error
		}
	}
	var ok bool
	if c.OutputTokens, ok = s.output(maxTokens, maxCompletion, n); !ok {
		return Cost{}, false
	}
	c.InputTokens = s.tokens + RequestOverheadTokens
	return c, true
}

// output is estimator.output on the fields' spans.
func (s *scan) output(maxTokens, maxCompletion, n span) (int64, bool) {
	if s.p == llm.Anthropic {
		mt, present, ok := s.positive(maxTokens)
		return mt, ok && present
	}
	mt, present, ok := s.positive(maxCompletion)
	if !ok {
		return 0, false
	}
	if !present {
		if mt, present, ok = s.positive(maxTokens); !ok {
			return 0, false
		}
		if !present {
			mt = OpenAIDefaultMaxTokens
		}
	}
	count, present, ok := s.positive(n)
	if !ok {
		return 0, false
	}
	if !present {
		count = 1
	}
	if mt > math.MaxInt64/count {
		return math.MaxInt64, true
	}
	return mt * count, true
}

// positive reads an integer field that must be >= 1: absent or null is
// (0, false, true); anything else but a plain positive integer is not ok.
func (s *scan) positive(v span) (int64, bool, bool) {
	if v.end == 0 || string(s.b[v.start:v.end]) == "null" {
		return 0, false, true
	}
	b := s.b[v.start:v.end]
	if len(b) > 18 || b[0] < '1' || b[0] > '9' {
		return 0, false, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true, true
}

// messages walks the messages array.
func (s *scan) messages() bool {
	if !s.open('[') {
		return false
	}
	for k := 0; ; k++ {
		done, ok := s.element(k)
		if !ok {
			return false
		}
		if done {
			return k > 0 // an empty list is an error
		}
		s.tokens += MessageOverheadTokens
		if s.null() {
			continue
		}
		if !s.message() {
			return false
		}
	}
}

// Message fields.
const (
	mRole = 1 << iota
	mContent
	mName
	mToolCalls
)

func (s *scan) message() bool {
	if !s.open('{') {
		return false
	}
	var seen int
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return false
		}
		if done {
			return true
		}
		var f int
		switch string(key) {
		case "role":
			f = mRole
		case "content":
			f = mContent
		case "name":
			f = mName
		case "tool_calls":
			f = mToolCalls
		default:
			if foldsTo(key, "role", "content", "name", "tool_calls") {
				return false
			}
		}
		if seen&f != 0 {
			return false
		}
		seen |= f
		switch f {
		case mContent:
			ok = s.content()
		case mRole:
			_, ok = s.stringOrNull()
		case mName:
			var v span
			if v, ok = s.stringOrNull(); ok {
				s.text(v)
			}
		default: // tool_calls, unknown fields
			var v span
			if v, ok = s.skip(); ok && f == mToolCalls {
				s.raw(v)
			}
		}
		if !ok {
			return false
		}
	}
}

// content walks a string-or-blocks value (message content, system,
// tool_result content).
func (s *scan) content() bool {
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		v, ok := s.stringOrNull()
		if ok {
			s.text(v)
		}
		return ok
	case 'n':
		return s.null()
	case '[':
	default:
		return false
	}
	s.open('[')
	for k := 0; ; k++ {
		done, ok := s.element(k)
		if !ok {
			return false
		}
		if done {
			return true
		}
		if s.null() {
			continue
		}
		if !s.block() {
			return false
		}
	}
}

// Content block fields.
const (
	bType = 1 << iota
	bText
	bThinking
	bData
	bName
	bInput
	bContent
	bSource
)

var blockFields = []string{"type", "text", "thinking", "data", "name", "input", "content", "source"}

func (s *scan) block() bool {
	s.ws()
	start := s.i
	if !s.open('{') {
		return false
	}
	var seen int
	var fields [8]span
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return false
		}
		if done {
			break
		}
		f := -1
		for j, name := range blockFields {
			if string(key) == name {
				f = j
				break
			}
		}
		if f < 0 && foldsTo(key, blockFields...) {
			return false
		}
		if f >= 0 {
			if seen&(1<<f) != 0 {
				return false
			}
			seen |= 1 << f
		}
		var v span
		if f >= 0 && 1<<f <= bName {
			v, ok = s.stringOrNull()
		} else {
			v, ok = s.skip()
		}
		if !ok {
			return false
		}
		if f >= 0 {
			fields[f] = v
		}
	}
	end := s.i
	typ := fields[0]
	if typ.end != 0 && s.b[typ.start] == '"' {
		for _, c := range s.b[typ.start+1 : typ.end-1] {
			if c == '\\' {
				return false // an escaped type name: leave it to encoding/json
			}
		}
		typ.start, typ.end = typ.start+1, typ.end-1
	} else {
		typ = span{}
	}
	switch string(s.b[typ.start:typ.end]) {
	case "text", "input_text":
		s.text(fields[1])
	case "thinking":
		s.text(fields[2])
	case "redacted_thinking":
		s.text(fields[3])
	case "image", "image_url", "input_image":
		s.tokens += ImageTokens
	case "tool_use", "server_tool_use", "mcp_tool_use":
		s.text(fields[4])
		s.raw(fields[5])
	case "tool_result":
		if c := fields[6]; c.end != 0 {
			// Walk the content again now that the type is known.
			save, depth := s.i, s.depth
			s.i = c.start
			ok := s.content()
			s.i, s.depth = save, depth
			return ok
		}
	case "document":
		return false // its source's semantics are left to encoding/json
	default:
		s.raw(span{start, end})
	}
	return true
}

// Tool fields.
const (
	tName = 1 << iota
	tDescription
	tInputSchema
	tFunction
)

func (s *scan) tools() bool {
	if s.null() {
		return true
	}
	if !s.open('[') {
		return false
	}
	for k := 0; ; k++ {
		done, ok := s.element(k)
		if !ok {
			return false
		}
		if done {
			return true
		}
		if k == 0 {
			s.tokens += ToolUseSystemTokens
		}
		if s.null() {
			continue
		}
		if !s.tool(false) {
			return false
		}
	}
}

// tool walks a tool definition, or (fn) its OpenAI function object.
func (s *scan) tool(fn bool) bool {
	if !s.open('{') {
		return false
	}
	schema, nested := "input_schema", "function"
	if fn {
		schema, nested = "parameters", "\x00"
	}
	var seen int
	for k := 0; ; k++ {
		key, plain, done, ok := s.member(k)
		if !ok || (!done && !plain) {
			return false
		}
		if done {
			return true
		}
		var f int
		switch string(key) {
		case "name":
			f = tName
		case "description":
			f = tDescription
		case schema:
			f = tInputSchema
		case nested:
			f = tFunction
		default:
			if foldsTo(key, "name", "description", schema, nested) {
				return false
			}
		}
		if seen&f != 0 {
			return false
		}
		seen |= f
		var v span
		switch f {
		case tName, tDescription:
			if v, ok = s.stringOrNull(); ok {
				s.text(v)
			}
		case tFunction:
			if !s.null() {
				ok = s.tool(true)
			}
		default:
			if v, ok = s.skip(); ok && f == tInputSchema {
				s.raw(v)
			}
		}
		if !ok {
			return false
		}
	}
}

// text counts a string value (a span of a string literal; absent or null
// counts nothing) as estimator.text counts its decoded text.
func (s *scan) text(v span) {
	if v.end == 0 || s.b[v.start] != '"' {
		return
	}
	if s.bpt > 0 {
		n := int64(v.end - v.start - 2)
		if v.end != s.plainEnd {
			n = int64(unquotedLen(s.b[v.start+1 : v.end-1]))
		}
		if n > 0 {
			s.tokens += (n + s.bpt - 1) / s.bpt
		}
		return
	}
	if str := s.str(v); str != "" {
		s.tokens += s.tc.CountTokens(str)
	}
}

// raw counts a value's JSON as estimator.raw does.
func (s *scan) raw(v span) {
	b := s.b[v.start:v.end]
	if len(b) == 0 || string(b) == "null" {
		return
	}
	if s.bpt > 0 {
		s.tokens += (int64(len(b)) + s.bpt - 1) / s.bpt
		return
	}
	s.tokens += s.tc.CountTokens(string(b))
}

// str decodes a string literal.
func (s *scan) str(v span) string {
	lit := s.b[v.start:v.end]
	inner := lit[1 : len(lit)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(inner)
	}
	var out string
	_ = json.Unmarshal(lit, &out) // the literal is valid
	return out
}
