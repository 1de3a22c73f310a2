package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/sluicehq/sluice/internal/llm"
)

// Fixed amounts used by the estimate. They are deliberately on the high side:
// the estimate is what the quota is debited before sending, and it is
// reconciled with the usage the response reports afterwards.
const (
	// BytesPerTokenDefault is ByteCounter's divisor when BytesPerToken is
	// not set. English text averages about 4 bytes per token on both
	// providers' tokenizers; code, JSON and non-Latin scripts are denser in
	// tokens, so the heuristic is an estimate, not a bound.
	BytesPerTokenDefault = 4
	// MessageOverheadTokens is added per message (role and separators),
	// as in OpenAI's cookbook.
	MessageOverheadTokens = 4
	// RequestOverheadTokens is added once per request (reply priming).
	RequestOverheadTokens = 3
	// ImageTokens is charged per image block (Anthropic "image", OpenAI
	// "image_url"/"input_image"). Anthropic documents about 1,600 tokens
	// for a 1.15-megapixel image, the largest it sends unresized; OpenAI's
	// high-detail 1024x1024 image is 765 tokens.
	ImageTokens = 1600
	// ToolUseSystemTokens is added once when the request declares tools:
	// Anthropic documents a 313–346 token tool-use system prompt.
	ToolUseSystemTokens = 350
	// OpenAIDefaultMaxTokens is the output reservation per choice for an
	// OpenAI request that sets neither max_completion_tokens nor max_tokens.
	OpenAIDefaultMaxTokens = 4096
)

// TokenCounter counts the tokens of a piece of prompt text. Plug in a real
// tokenizer for a tighter estimate; the default is ByteCounter.
type TokenCounter interface {
	CountTokens(text string) int64
}

// ByteCounter is the default TokenCounter: one token per BytesPerToken bytes
// of UTF-8, rounded up. Its zero value uses BytesPerTokenDefault.
type ByteCounter struct {
	// BytesPerToken is the divisor. Defaults to BytesPerTokenDefault (4).
	BytesPerToken int
}

// CountTokens returns ceil(len(text) / BytesPerToken).
func (c ByteCounter) CountTokens(text string) int64 {
	bpt := int64(c.BytesPerToken)
	if bpt <= 0 {
		bpt = BytesPerTokenDefault
	}
	return (int64(len(text)) + bpt - 1) / bpt
}

// Estimate is EstimateWith using ByteCounter{}.
func Estimate(p llm.Protocol, body []byte) (Cost, error) {
	return EstimateWith(p, body, ByteCounter{})
}

// EstimateWith validates a request body enough to price it and returns its
// cost: the model, whether it streams, a conservative input-token estimate
// (system, messages, tools, plus fixed overheads) and the output reservation
// (Anthropic max_tokens; OpenAI max_completion_tokens, else max_tokens, else
// OpenAIDefaultMaxTokens, times n). A body the provider would reject gives a
// *RequestError (matching ErrInvalidRequest). A nil tc means ByteCounter{}.
func EstimateWith(p llm.Protocol, body []byte, tc TokenCounter) (Cost, error) {
	if tc == nil {
		tc = ByteCounter{}
	}
	if c, ok := scanEstimate(p, body, tc); ok {
		return c, nil
	}
	return estimateReference(p, body, tc)
}

// estimateReference prices a body by decoding it with encoding/json: the
// definition of the estimate's answers, which scanEstimate reproduces in
// one pass without a tree. EstimateWith uses it for what the scanner
// leaves to it: every invalid body (to name the error exactly as before)
// and the rare valid shapes listed at scanEstimate.
func estimateReference(p llm.Protocol, body []byte, tc TokenCounter) (Cost, error) {
	e := estimator{p: p, tc: tc}
	return e.run(body)
}

type estimator struct {
	p      llm.Protocol
	tc     TokenCounter
	tokens int64
	// countOnly prices a token-counting body (Anthropic count_tokens,
	// OpenAI responses/input_tokens): no max_tokens, no output.
	countOnly bool
}

func (e *estimator) text(s string) {
	if s != "" {
		e.tokens += e.tc.CountTokens(s)
	}
}

func (e *estimator) raw(b json.RawMessage) {
	if len(b) > 0 && string(b) != "null" {
		e.tokens += e.tc.CountTokens(string(b))
	}
}

func (e *estimator) run(body []byte) (Cost, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) || (err == nil && top == nil) {
			return Cost{}, e.notObject()
		}
		return Cost{}, e.notJSON()
	}
	var c Cost
	model, ok, err := e.stringField(top, "model")
	if err != nil {
		return Cost{}, err
	}
	if !ok || model == "" {
		return Cost{}, e.missing("model")
	}
	c.Model = model
	if c.Stream, _, err = e.boolField(top, "stream"); err != nil {
		return Cost{}, err
	}
	if c.ServiceTier, _, err = e.stringField(top, "service_tier"); err != nil {
		return Cost{}, err
	}
	if c.OutputTokens, err = e.output(top); err != nil {
		return Cost{}, err
	}
	if err := e.messages(top); err != nil {
		return Cost{}, err
	}
	if sys, ok := top["system"]; ok && e.p == llm.Anthropic {
		if err := e.content(sys, "system"); err != nil {
			return Cost{}, err
		}
	}
	if err := e.tools(top); err != nil {
		return Cost{}, err
	}
	c.InputTokens = e.tokens + RequestOverheadTokens
	return c, nil
}

// output computes the output reservation.
func (e *estimator) output(top map[string]json.RawMessage) (int64, error) {
	if e.p == llm.Anthropic {
		if e.countOnly {
			return 0, nil
		}
		mt, ok, err := e.intField(top, "max_tokens")
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, e.missing("max_tokens")
		}
		if mt < 1 {
			return 0, e.tooSmall("max_tokens", mt)
		}
		return mt, nil
	}
	mt, ok, err := e.intField(top, "max_completion_tokens")
	if err != nil {
		return 0, err
	}
	if ok && mt < 1 {
		return 0, e.tooSmall("max_completion_tokens", mt)
	}
	if !ok {
		mt, ok, err = e.intField(top, "max_tokens")
		if err != nil {
			return 0, err
		}
		if ok && mt < 1 {
			return 0, e.tooSmall("max_tokens", mt)
		}
		if !ok {
			mt = OpenAIDefaultMaxTokens
		}
	}
	n, ok, err := e.intField(top, "n")
	if err != nil {
		return 0, err
	}
	if !ok {
		n = 1
	}
	if n < 1 {
		return 0, e.tooSmall("n", n)
	}
	if mt > math.MaxInt64/n {
		return math.MaxInt64, nil
	}
	return mt * n, nil
}

type wireMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

func (e *estimator) messages(top map[string]json.RawMessage) error {
	raw, ok := top["messages"]
	if !ok || isNull(raw) {
		return e.missing("messages")
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return e.wrongType("messages", "list")
	}
	if len(msgs) == 0 {
		if e.p == llm.Anthropic {
			return invalidRequest("messages: List should have at least 1 item after validation, not 0")
		}
		return invalidRequest("[] is too short - 'messages'")
	}
	for i, m := range msgs {
		path := "messages." + strconv.Itoa(i)
		var wm wireMessage
		if err := e.decode(m, &wm, path); err != nil {
			return err
		}
		e.tokens += MessageOverheadTokens
		e.text(wm.Name)
		e.raw(wm.ToolCalls)
		if err := e.content(wm.Content, path+".content"); err != nil {
			return err
		}
	}
	return nil
}

type contentBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking string          `json:"thinking"`
	Data     string          `json:"data"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Content  json.RawMessage `json:"content"`
	Source   json.RawMessage `json:"source"`
}

// content counts a string-or-blocks value (message content, system,
// tool_result content).
func (e *estimator) content(raw json.RawMessage, path string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return e.wrongType(path, "string")
		}
		e.text(s)
		return nil
	case '[':
		var blocks []json.RawMessage
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return e.wrongType(path, "list")
		}
		for i, b := range blocks {
			if err := e.block(b, path+"."+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		return nil
	}
	return e.wrongType(path, "list")
}

func (e *estimator) block(raw json.RawMessage, path string) error {
	var b contentBlock
	if err := e.decode(raw, &b, path); err != nil {
		return err
	}
	switch b.Type {
	case "text", "input_text":
		e.text(b.Text)
	case "thinking":
		e.text(b.Thinking)
	case "redacted_thinking":
		e.text(b.Data)
	case "image", "image_url", "input_image":
		e.tokens += ImageTokens
	case "tool_use", "server_tool_use", "mcp_tool_use":
		e.text(b.Name)
		e.raw(b.Input)
	case "tool_result":
		return e.content(b.Content, path+".content")
	case "document":
		var src struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}
		if json.Unmarshal(b.Source, &src) == nil && src.Type == "text" {
			e.text(src.Data)
		} else {
			e.raw(b.Source)
		}
		e.raw(b.Content)
	default:
		// Unknown or opaque blocks (audio, files, server tool results) count
		// as their whole JSON: over-estimates, never under.
		e.raw(raw)
	}
	return nil
}

type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Function    *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

func (e *estimator) tools(top map[string]json.RawMessage) error {
	raw, ok := top["tools"]
	if !ok || isNull(raw) {
		return nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return e.wrongType("tools", "list")
	}
	if len(tools) > 0 {
		e.tokens += ToolUseSystemTokens
	}
	for i, t := range tools {
		var td toolDef
		if err := e.decode(t, &td, "tools."+strconv.Itoa(i)); err != nil {
			return err
		}
		e.text(td.Name)
		e.text(td.Description)
		e.raw(td.InputSchema)
		if td.Function != nil {
			e.text(td.Function.Name)
			e.text(td.Function.Description)
			e.raw(td.Function.Parameters)
		}
	}
	return nil
}

// decode unmarshals an object, turning type mismatches into RequestErrors
// that name the field.
func (e *estimator) decode(raw json.RawMessage, v any, path string) error {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) && ute.Field != "" {
		return e.wrongType(path+"."+ute.Field, kindName(ute.Type))
	}
	return e.wrongType(path, "dictionary")
}

func (e *estimator) stringField(top map[string]json.RawMessage, key string) (string, bool, error) {
	raw, ok := top[key]
	if !ok || isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, e.wrongType(key, "string")
	}
	return s, true, nil
}

func (e *estimator) boolField(top map[string]json.RawMessage, key string) (bool, bool, error) {
	raw, ok := top[key]
	if !ok || isNull(raw) {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, false, e.wrongType(key, "boolean")
	}
	return b, true, nil
}

func (e *estimator) intField(top map[string]json.RawMessage, key string) (int64, bool, error) {
	raw, ok := top[key]
	if !ok || isNull(raw) {
		return 0, false, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false, e.wrongType(key, "integer")
	}
	return n, true, nil
}

func (e *estimator) notJSON() *RequestError {
	if e.p == llm.OpenAI {
		return invalidRequest("We could not parse the JSON body of your request. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.")
	}
	return invalidRequest("There was an issue with your request body: it is not valid JSON.")
}

func (e *estimator) notObject() *RequestError {
	if e.p == llm.OpenAI {
		return invalidRequest("Invalid body: expected a JSON object.")
	}
	return invalidRequest("Input should be a valid dictionary or object to extract fields from")
}

func (e *estimator) missing(field string) *RequestError {
	if e.p == llm.OpenAI {
		return invalidRequest("Missing required parameter: '%s'.", field)
	}
	return invalidRequest("%s: Field required", field)
}

func (e *estimator) wrongType(field, kind string) *RequestError {
	if e.p == llm.OpenAI {
		return invalidRequest("Invalid type for '%s': expected %s.", field, article(kind))
	}
	return invalidRequest("%s: Input should be a valid %s", field, kind)
}

func (e *estimator) tooSmall(field string, got int64) *RequestError {
	if e.p == llm.OpenAI {
		return invalidRequest("Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", field, got)
	}
	return invalidRequest("%s: Input should be greater than or equal to 1", field)
}

func article(kind string) string {
	switch kind {
	case "integer", "object":
		return "an " + kind
	case "dictionary":
		return "an object"
	case "list":
		return "an array"
	}
	return "a " + kind
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "dictionary"
	default:
		return fmt.Sprint(t)
	}
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}
