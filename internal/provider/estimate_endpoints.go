package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/llm"
)

// ErrUnknownEndpoint means an endpoint that is not one of the protocol's
// (EstimateFor with OpenAI and EndpointCountTokens, say).
var ErrUnknownEndpoint = errors.New("not an endpoint of the protocol")

// EstimateFor prices a request body for endpoint e of protocol p with tc
// (nil means ByteCounter{}):
//
//   - EndpointChat: EstimateWith.
//   - EndpointCountTokens: Anthropic, the messages estimate of the body,
//     which has no max_tokens; OpenAI (POST /v1/responses/input_tokens),
//     the Responses estimate of its input (model optional, no output).
//     OutputTokens 0: the provider charges it nothing but a request of its
//     own counting limit.
//   - EndpointResponses (OpenAI): instructions, tools (their names,
//     descriptions and parameters, plus ToolUseSystemTokens), the input (a
//     string, or items: a message counts MessageOverheadTokens and its text
//     parts, ImageTokens per image, the raw JSON of other parts; a
//     function_call its name and arguments; a function_call_output its
//     output; any other item its raw JSON), plus RequestOverheadTokens;
//     OutputTokens is max_output_tokens (at least 16), else
//     OpenAIDefaultMaxTokens. previous_response_id is returned in
//     Cost.PreviousResponseID: its tokens are not in the body.
//   - EndpointEmbeddings (OpenAI): every input's tokens (a string counted
//     by tc, a token array its length), no overheads; OutputTokens 0.
//
// A body the provider would reject gives a *RequestError (matching
// ErrInvalidRequest); an endpoint foreign to p, ErrUnknownEndpoint.
func EstimateFor(p llm.Protocol, e Endpoint, body []byte, tc TokenCounter) (Cost, error) {
	if tc == nil {
		tc = ByteCounter{}
	}
	switch {
	case e == EndpointChat:
		return EstimateWith(p, body, tc)
	case p == llm.Anthropic && e == EndpointCountTokens:
		est := estimator{p: p, tc: tc, countOnly: true}
		return est.run(body)
	case p == llm.OpenAI && e == EndpointResponses:
		est := estimator{p: p, tc: tc}
		return est.responses(body)
	case p == llm.OpenAI && e == EndpointCountTokens:
		est := estimator{p: p, tc: tc, countOnly: true}
		return est.responsesCount(body)
	case p == llm.OpenAI && e == EndpointEmbeddings:
		est := estimator{p: p, tc: tc}
		return est.embeddings(body)
	}
	return Cost{}, fmt.Errorf("pricing %s on %s: %w", e, p, ErrUnknownEndpoint)
}

// MinMaxOutputTokens is the smallest max_output_tokens the Responses API
// accepts.
const MinMaxOutputTokens = 16

func (e *estimator) object(body []byte) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) || (err == nil && top == nil) {
			return nil, e.notObject()
		}
		return nil, e.notJSON()
	}
	return top, nil
}

func (e *estimator) model(top map[string]json.RawMessage) (string, error) {
	model, ok, err := e.stringField(top, "model")
	if err != nil {
		return "", err
	}
	if !ok || model == "" {
		return "", e.missing("model")
	}
	return model, nil
}

func (e *estimator) responses(body []byte) (Cost, error) {
	top, err := e.object(body)
	if err != nil {
		return Cost{}, err
	}
	var c Cost
	if c.Model, err = e.model(top); err != nil {
		return Cost{}, err
	}
	if c.Stream, _, err = e.boolField(top, "stream"); err != nil {
		return Cost{}, err
	}
	if c.ServiceTier, _, err = e.stringField(top, "service_tier"); err != nil {
		return Cost{}, err
	}
	mt, ok, err := e.intField(top, "max_output_tokens")
	switch {
	case err != nil:
		return Cost{}, err
	case !ok:
		mt = OpenAIDefaultMaxTokens
	case mt < MinMaxOutputTokens:
		return Cost{}, invalidRequest("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d, but got %d instead.",
			MinMaxOutputTokens, mt)
	}
	c.OutputTokens = mt
	if err := e.responsesPrompt(top, &c); err != nil {
		return Cost{}, err
	}
	return c, nil
}

// responsesCount prices an input-token count body (POST
// /v1/responses/input_tokens): the prompt a Responses create of the same
// fields would send; its model is optional and nothing is output.
func (e *estimator) responsesCount(body []byte) (Cost, error) {
	top, err := e.object(body)
	if err != nil {
		return Cost{}, err
	}
	var c Cost
	if c.Model, _, err = e.stringField(top, "model"); err != nil {
		return Cost{}, err
	}
	if err := e.responsesPrompt(top, &c); err != nil {
		return Cost{}, err
	}
	return c, nil
}

// responsesPrompt counts a Responses body's prompt into c: its
// instructions, input and tools, plus RequestOverheadTokens, and its
// previous_response_id.
func (e *estimator) responsesPrompt(top map[string]json.RawMessage, c *Cost) error {
	var err error
	if c.PreviousResponseID, _, err = e.stringField(top, "previous_response_id"); err != nil {
		return err
	}
	if raw, ok := top["instructions"]; ok && !isNull(raw) {
		if err := e.responseInput(raw, "instructions"); err != nil {
			return err
		}
	}
	if raw, ok := top["input"]; ok && !isNull(raw) {
		if err := e.responseInput(raw, "input"); err != nil {
			return err
		}
	}
	if err := e.responseTools(top); err != nil {
		return err
	}
	c.InputTokens = e.tokens + RequestOverheadTokens
	return nil
}

// responseInput counts a string or an array of input items.
func (e *estimator) responseInput(raw json.RawMessage, field string) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		e.tokens += MessageOverheadTokens
		e.text(s)
		return nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return e.wrongType(field, "string or array")
	}
	for i, it := range items {
		if err := e.responseItem(it, field+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	return nil
}

// responseItemFields are the parts of an input item the estimate reads.
type responseItemFields struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

func (e *estimator) responseItem(raw json.RawMessage, path string) error {
	var it responseItemFields
	if err := e.decode(raw, &it, path); err != nil {
		return err
	}
	switch {
	case it.Type == "message" || (it.Type == "" && it.Role != ""):
		e.tokens += MessageOverheadTokens
		return e.responseContent(it.Content, path+".content")
	case it.Type == "function_call" || it.Type == "custom_tool_call":
		e.text(it.Name)
		e.text(it.Arguments)
	case it.Type == "function_call_output" || it.Type == "custom_tool_call_output":
		var s string
		if json.Unmarshal(it.Output, &s) == nil {
			e.text(s)
		} else {
			e.raw(it.Output)
		}
	default:
		e.raw(raw)
	}
	return nil
}

// responseContent counts a message's content: a string or parts.
func (e *estimator) responseContent(raw json.RawMessage, path string) error {
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		e.text(s)
		return nil
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return e.wrongType(path, "string or array")
	}
	for i, pt := range parts {
		var part struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		}
		if err := e.decode(pt, &part, path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
		switch part.Type {
		case "input_text", "output_text", "text":
			e.text(part.Text)
		case "refusal":
			e.text(part.Refusal)
		case "input_image":
			e.tokens += ImageTokens
		default:
			e.raw(pt)
		}
	}
	return nil
}

// responseTools counts Responses tools: a function tool's name,
// description and parameters, any other tool its raw JSON.
func (e *estimator) responseTools(top map[string]json.RawMessage) error {
	raw, ok := top["tools"]
	if !ok || isNull(raw) {
		return nil
	}
	var tools []json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return e.wrongType("tools", "list")
	}
	if len(tools) > 0 {
		e.tokens += ToolUseSystemTokens
	}
	for i, t := range tools {
		var td struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := e.decode(t, &td, "tools["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
		if td.Type != "function" {
			e.raw(t)
			continue
		}
		e.text(td.Name)
		e.text(td.Description)
		e.raw(td.Parameters)
	}
	return nil
}

// Embeddings limits (OpenAI): at most 2048 inputs per request.
const MaxEmbeddingInputs = 2048

func (e *estimator) embeddings(body []byte) (Cost, error) {
	top, err := e.object(body)
	if err != nil {
		return Cost{}, err
	}
	var c Cost
	if c.Model, err = e.model(top); err != nil {
		return Cost{}, err
	}
	if d, ok, err := e.intField(top, "dimensions"); err != nil {
		return Cost{}, err
	} else if ok && d < 1 {
		return Cost{}, e.tooSmall("dimensions", d)
	}
	raw, ok := top["input"]
	if !ok || isNull(raw) {
		return Cost{}, e.missing("input")
	}
	bad := invalidRequest("'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.")
	var s string
	var strs []string
	var toks []int64
	var arrays [][]int64
	switch {
	case json.Unmarshal(raw, &s) == nil:
		if s == "" {
			return Cost{}, bad
		}
		c.InputTokens = e.tc.CountTokens(s)
	case json.Unmarshal(raw, &strs) == nil && len(strs) > 0:
		if len(strs) > MaxEmbeddingInputs {
			return Cost{}, invalidRequest("Invalid 'input': maximum length of array is %d, got %d.", MaxEmbeddingInputs, len(strs))
		}
		for _, s := range strs {
			if s == "" {
				return Cost{}, bad
			}
			c.InputTokens += e.tc.CountTokens(s)
		}
	case json.Unmarshal(raw, &toks) == nil && len(toks) > 0:
		c.InputTokens = int64(len(toks))
	case json.Unmarshal(raw, &arrays) == nil && len(arrays) > 0:
		if len(arrays) > MaxEmbeddingInputs {
			return Cost{}, invalidRequest("Invalid 'input': maximum length of array is %d, got %d.", MaxEmbeddingInputs, len(arrays))
		}
		for _, a := range arrays {
			if len(a) == 0 {
				return Cost{}, bad
			}
			c.InputTokens += int64(len(a))
		}
	default:
		return Cost{}, bad
	}
	return c, nil
}
