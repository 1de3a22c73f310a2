package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
)

// The mock parses request bodies itself (it must not share parsing code with
// the gateway it tests). Input tokens are estimated from bytes:
// ceil(bytes/4) over the text of system, messages and tools, where a text
// block or string counts its characters and any other block its raw JSON.

// request is what the mock needs from a parsed request body.
type request struct {
	model     string
	maxTokens int64 // per choice; Anthropic max_tokens, OpenAI max_completion_tokens | max_tokens | default
	n         int   // OpenAI choices; 1 for Anthropic
	stream    bool
	// includeUsage is OpenAI stream_options.include_usage.
	includeUsage bool
	// inputTokens is the byte-based estimate of the whole prompt.
	inputTokens int64
	// cacheTokens is the part of inputTokens up to and including the last
	// block marked cache_control (Anthropic), 0 when none is marked.
	cacheTokens int64
	// cacheKey identifies the cacheable prefix.
	cacheKey uint64
	// bodyHash seeds the generated reply.
	bodyHash uint64
	// fixedOutput is the reply length asked for in HeaderOutputTokens
	// (0 when absent).
	fixedOutput int64
}

// HeaderOutputTokens, on a request, fixes the length of each reply choice
// to min(N, max_tokens) tokens instead of drawing it from
// Config.OutputTokens, so a replayed trace gets the lengths it recorded.
// It is not a provider header; a gateway forwards it like any other.
const HeaderOutputTokens = "X-Mock-Output-Tokens"

// OutputTokensHeaderMax is the largest value HeaderOutputTokens accepts.
const OutputTokensHeaderMax = 1_000_000

// outputTokensHeader reads HeaderOutputTokens: 0 when absent, else an
// integer in [1, OutputTokensHeaderMax] given once; anything else is a
// 400 in the protocol's shape.
func outputTokensHeader(h http.Header, proto string) (int64, *apiError) {
	vals := h.Values(HeaderOutputTokens)
	if len(vals) == 0 {
		return 0, nil
	}
	bad := func(format string, args ...any) (int64, *apiError) {
		e := invalid(format, args...)
		if proto == protoOpenAI {
			e.code = "invalid_value"
		}
		return 0, e
	}
	if len(vals) > 1 {
		return bad("%s: give one value, got %d", HeaderOutputTokens, len(vals))
	}
	v := strings.TrimSpace(vals[0])
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > OutputTokensHeaderMax {
		if len(v) > 32 {
			v = v[:32] + "…"
		}
		return bad("%s: must be an integer between 1 and %d, got %q", HeaderOutputTokens, OutputTokensHeaderMax, v)
	}
	return n, nil
}

// replyLength is the length of reply choice: the fixed length capped by
// max_tokens when the request asked for one, else drawn as outputLength
// does.
func (r request) replyLength(out OutputRange, seed uint64, choice int) int64 {
	if r.fixedOutput > 0 {
		return min(r.fixedOutput, r.maxTokens)
	}
	return outputLength(out, seed, r.bodyHash, choice, r.maxTokens)
}

// apiError is an error answer before it is put in a protocol's envelope.
type apiError struct {
	status  int
	typ     string // Anthropic error.type / OpenAI error.type
	message string
	param   string // OpenAI only
	code    string // OpenAI only
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.typ, e.message) }

func invalid(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
}

func tokensOf(nbytes int) int64 { return int64((nbytes + 3) / 4) }

// estimator walks prompt pieces in order, counting bytes and hashing them.
type estimator struct {
	bytes       int
	cacheBytes  int
	cacheKey    uint64
	h           hash.Hash64
	sawCacheCtl bool
}

func newEstimator() *estimator { return &estimator{h: fnv.New64a()} }

func (e *estimator) add(s string) {
	e.bytes += len(s)
	_, _ = e.h.Write([]byte(s))
}

// mark records that the prompt so far is a cacheable prefix.
func (e *estimator) mark() {
	e.sawCacheCtl = true
	e.cacheBytes = e.bytes
	e.cacheKey = e.h.Sum64()
}

func bodyHash(body []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(body)
	return h.Sum64()
}

func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, err
	}
	if top == nil {
		return nil, fmt.Errorf("body is null")
	}
	return top, nil
}

func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// anthropicBlock is the part of a content block the mock reads.
type anthropicBlock struct {
	Type         *string         `json:"type"`
	Text         *string         `json:"text"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// addBlocks counts a string-or-blocks content value.
func (e *estimator) addAnthropicContent(field string, raw json.RawMessage) *apiError {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		e.add(s)
		return nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return invalid("%s: Input should be a valid string or a list of content blocks", field)
	}
	for i, rb := range blocks {
		var b anthropicBlock
		if err := json.Unmarshal(rb, &b); err != nil || b.Type == nil {
			return invalid("%s.%d.type: Field required", field, i)
		}
		if *b.Type == "text" {
			if b.Text == nil {
				return invalid("%s.%d.text: Field required", field, i)
			}
			e.add(*b.Text)
		} else {
			e.add(string(rb))
		}
		if present(b.CacheControl) {
			e.mark()
		}
	}
	return nil
}

// parseAnthropic parses a Messages (or count_tokens, needMax false) body.
func parseAnthropic(body []byte, needMax bool) (request, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return request{}, invalid("invalid request body: %v", err)
	}
	r := request{n: 1, bodyHash: bodyHash(body)}
	if !present(top["model"]) {
		return request{}, invalid("model: Field required")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return request{}, invalid("model: Input should be a non-empty string")
	}
	if needMax {
		if !present(top["max_tokens"]) {
			return request{}, invalid("max_tokens: Field required")
		}
		if err := json.Unmarshal(top["max_tokens"], &r.maxTokens); err != nil || r.maxTokens < 1 {
			return request{}, invalid("max_tokens: Input should be an integer greater than or equal to 1")
		}
	}
	if present(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &r.stream); err != nil {
			return request{}, invalid("stream: Input should be a valid boolean")
		}
	}
	if !present(top["messages"]) {
		return request{}, invalid("messages: Field required")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return request{}, invalid("messages: Input should be a valid list of message objects")
	}
	if len(msgs) == 0 {
		return request{}, invalid("messages: at least one message is required")
	}
	e := newEstimator()
	if present(top["tools"]) {
		var tools []json.RawMessage
		if err := json.Unmarshal(top["tools"], &tools); err != nil {
			return request{}, invalid("tools: Input should be a valid list")
		}
		for _, t := range tools {
			e.add(string(t))
			var tc struct {
				CacheControl json.RawMessage `json:"cache_control"`
			}
			if json.Unmarshal(t, &tc) == nil && present(tc.CacheControl) {
				e.mark()
			}
		}
	}
	if present(top["system"]) {
		if aerr := e.addAnthropicContent("system", top["system"]); aerr != nil {
			return request{}, aerr
		}
	}
	for i, m := range msgs {
		var role string
		if m == nil || json.Unmarshal(m["role"], &role) != nil || (role != "user" && role != "assistant") {
			return request{}, invalid("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if !present(m["content"]) {
			return request{}, invalid("messages.%d.content: Field required", i)
		}
		if aerr := e.addAnthropicContent(fmt.Sprintf("messages.%d.content", i), m["content"]); aerr != nil {
			return request{}, aerr
		}
	}
	r.inputTokens = max(1, tokensOf(e.bytes))
	if e.sawCacheCtl {
		r.cacheTokens = min(r.inputTokens, tokensOf(e.cacheBytes))
		r.cacheKey = e.cacheKey
	}
	return r, nil
}

func openAIInvalid(param, code, format string, args ...any) *apiError {
	e := invalid(format, args...)
	e.param, e.code = param, code
	return e
}

var openAIRoles = []string{"system", "developer", "user", "assistant", "tool", "function"}

// parseOpenAI parses a Chat Completions body; defaultMax is the per-choice
// reservation when the body names none.
func parseOpenAI(body []byte, defaultMax int64) (request, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return request{}, openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err)
	}
	r := request{n: 1, bodyHash: bodyHash(body), maxTokens: defaultMax}
	if !present(top["model"]) {
		return request{}, openAIInvalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return request{}, openAIInvalid("model", "invalid_type", "Invalid type for 'model': expected a non-empty string.")
	}
	for _, f := range []string{"max_tokens", "max_completion_tokens"} { // the latter wins
		if present(top[f]) {
			if err := json.Unmarshal(top[f], &r.maxTokens); err != nil || r.maxTokens < 1 {
				return request{}, openAIInvalid(f, "invalid_value", "Invalid '%s': expected an integer >= 1.", f)
			}
		}
	}
	if present(top["n"]) {
		if err := json.Unmarshal(top["n"], &r.n); err != nil || r.n < 1 || r.n > 128 {
			return request{}, openAIInvalid("n", "invalid_value", "Invalid 'n': expected an integer between 1 and 128.")
		}
	}
	if present(top["stream"]) {
		if err := json.Unmarshal(top["stream"], &r.stream); err != nil {
			return request{}, openAIInvalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean.")
		}
	}
	if present(top["stream_options"]) {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(top["stream_options"], &so); err != nil {
			return request{}, openAIInvalid("stream_options", "invalid_type", "Invalid type for 'stream_options': expected an object.")
		}
		r.includeUsage = so.IncludeUsage
	}
	if !present(top["messages"]) {
		return request{}, openAIInvalid("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil {
		return request{}, openAIInvalid("messages", "invalid_type", "Invalid type for 'messages': expected an array of objects.")
	}
	if len(msgs) == 0 {
		return request{}, openAIInvalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	e := newEstimator()
	if present(top["tools"]) {
		e.add(string(top["tools"]))
	}
	for i, m := range msgs {
		var role string
		if m == nil || json.Unmarshal(m["role"], &role) != nil || !contains(openAIRoles, role) {
			return request{}, openAIInvalid(fmt.Sprintf("messages[%d].role", i), "invalid_value",
				"Invalid value for 'messages[%d].role': supported values are %s.", i, "'"+strings.Join(openAIRoles, "', '")+"'")
		}
		if c := m["content"]; present(c) {
			var s string
			if json.Unmarshal(c, &s) == nil {
				e.add(s)
				continue
			}
			var parts []struct {
				Type string  `json:"type"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return request{}, openAIInvalid(fmt.Sprintf("messages[%d].content", i), "invalid_type",
					"Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i)
			}
			for _, p := range parts {
				if p.Text != nil {
					e.add(*p.Text)
				}
			}
		}
		if tc := m["tool_calls"]; present(tc) {
			e.add(string(tc))
		}
	}
	r.inputTokens = max(1, tokensOf(e.bytes))
	return r, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
