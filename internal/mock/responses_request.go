package mock

import (
	"encoding/json"
	"fmt"
)

// OpenAI Responses bodies. The prompt is tools (their raw JSON, one
// block), instructions, the previous turn's conversation (its input items
// and its output text, when previous_response_id names one) and the input
// items: a string is one user message; a message item counts the text of
// its string content or of its text parts and the raw JSON of its other
// parts; any other item (function_call, function_call_output, …) its raw
// JSON.

// responsesRequest is a parsed POST /v1/responses body.
type responsesRequest struct {
	request
	instructions *string
	tools        json.RawMessage
	items        []map[string]any // the input items, as input_items lists them
	// maxOutput is max_output_tokens as given (nil when absent; the
	// reservation is then Config.DefaultMaxTokens).
	maxOutput  *int64
	previousID string
	background bool
	store      bool
	effort     *string // reasoning.effort
	metadata   json.RawMessage
	cacheKey   *string
	// convoFrom is the first prompt block of the conversation (after
	// tools and instructions): what a later turn carries over.
	convoFrom int
}

// minMaxOutputTokens is the smallest max_output_tokens OpenAI accepts.
const minMaxOutputTokens = 16

var responseRoles = []string{"user", "assistant", "system", "developer"}

// responseItems reads input: a string or an array of items. It adds each
// item's text to p and returns the items in the form input_items lists.
func responseItems(raw json.RawMessage, p *prompt) ([]map[string]any, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		p.add(s)
		return []map[string]any{{"id": hexID("msg_"), "type": "message", "role": "user", "status": "completed",
			"content": []any{map[string]any{"type": "input_text", "text": s}}}}, nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, openAIInvalid("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items.")
	}
	out := make([]map[string]any, 0, len(items))
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		if it == nil {
			return nil, openAIInvalid(param, "invalid_type", "Invalid type for '%s': expected an object.", param)
		}
		typ := "message"
		if present(it["type"]) && json.Unmarshal(it["type"], &typ) != nil {
			return nil, openAIInvalid(param+".type", "invalid_type", "Invalid type for '%s.type': expected a string.", param)
		}
		item := map[string]any{}
		for k, v := range it {
			item[k] = v
		}
		if typ != "message" {
			raw, _ := json.Marshal(it)
			p.add(string(raw))
			if _, ok := item["id"]; !ok {
				item["id"] = hexID("item_")
			}
			out = append(out, item)
			continue
		}
		var role string
		if json.Unmarshal(it["role"], &role) != nil || !contains(responseRoles, role) {
			return nil, openAIInvalid(param+".role", "invalid_value",
				"Invalid value for '%s.role': supported values are 'user', 'assistant', 'system' and 'developer'.", param)
		}
		content := it["content"]
		if json.Unmarshal(content, &s) == nil {
			p.add(s)
			part := "input_text"
			if role == "assistant" {
				part = "output_text"
			}
			item["content"] = []any{map[string]any{"type": part, "text": s}}
		} else {
			var parts []json.RawMessage
			if err := json.Unmarshal(content, &parts); err != nil {
				return nil, openAIInvalid(param+".content", "invalid_type",
					"Invalid type for '%s.content': expected a string or an array of content parts.", param)
			}
			for _, pt := range parts {
				var tp struct {
					Type string  `json:"type"`
					Text *string `json:"text"`
				}
				if json.Unmarshal(pt, &tp) == nil && tp.Text != nil {
					p.add(*tp.Text)
				} else {
					p.add(string(pt))
				}
			}
		}
		item["type"] = "message"
		if _, ok := item["id"]; !ok {
			item["id"] = hexID("msg_")
		}
		item["status"] = "completed"
		out = append(out, item)
	}
	return out, nil
}

// parseResponses parses a Responses create body. prev resolves
// previous_response_id to that response's conversation (nil when the key
// has no such response).
func parseResponses(body []byte, defaultMax int64, prev func(id string) (*prompt, *apiError)) (responsesRequest, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return responsesRequest{}, openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err)
	}
	r := responsesRequest{request: request{n: 1, bodyHash: bodyHash(body), maxTokens: defaultMax}, store: true}
	if !present(top["model"]) {
		return responsesRequest{}, openAIInvalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if err := json.Unmarshal(top["model"], &r.model); err != nil || r.model == "" {
		return responsesRequest{}, openAIInvalid("model", "invalid_type", "Invalid type for 'model': expected a non-empty string.")
	}
	if present(top["max_output_tokens"]) {
		var n int64
		if err := json.Unmarshal(top["max_output_tokens"], &n); err != nil || n < minMaxOutputTokens {
			return responsesRequest{}, openAIInvalid("max_output_tokens", "integer_below_min_value",
				"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d.", minMaxOutputTokens)
		}
		r.maxOutput, r.maxTokens = &n, n
	}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"stream", &r.stream}, {"background", &r.background}, {"store", &r.store}} {
		if present(top[f.name]) && json.Unmarshal(top[f.name], f.dst) != nil {
			return responsesRequest{}, openAIInvalid(f.name, "invalid_type", "Invalid type for '%s': expected a boolean.", f.name)
		}
	}
	if r.background && !r.store {
		return responsesRequest{}, openAIInvalid("background", "invalid_value", "Background mode requires 'store' to be true.")
	}
	p := &prompt{model: r.model}
	if aerr := openAIShared(top, &r.request, p); aerr != nil {
		return responsesRequest{}, aerr
	}
	if p.ns != "" {
		r.cacheKey = &p.ns
	}
	if present(top["reasoning"]) {
		var rs struct {
			Effort *string `json:"effort"`
		}
		if json.Unmarshal(top["reasoning"], &rs) != nil {
			return responsesRequest{}, openAIInvalid("reasoning", "invalid_type", "Invalid type for 'reasoning': expected an object.")
		}
		r.effort = rs.Effort
	}
	if present(top["metadata"]) {
		r.metadata = top["metadata"]
	}
	if aerr := responsesPrompt(top, &r, p, prev); aerr != nil {
		return responsesRequest{}, aerr
	}
	if !present(top["input"]) && r.previousID == "" {
		return responsesRequest{}, openAIInvalid("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	r.prompt = p
	r.inputTokens = p.tokens()
	return r, nil
}

// parseInputTokens parses a POST /v1/responses/input_tokens body: the
// fields of a create that make its prompt (model optional, no output), so
// its count is the input the create would be charged. prev is as for
// parseResponses.
func parseInputTokens(body []byte, prev func(id string) (*prompt, *apiError)) (responsesRequest, *apiError) {
	top, err := decodeObject(body)
	if err != nil {
		return responsesRequest{}, openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err)
	}
	var r responsesRequest
	if present(top["model"]) && json.Unmarshal(top["model"], &r.model) != nil {
		return responsesRequest{}, openAIInvalid("model", "invalid_type", "Invalid type for 'model': expected a string.")
	}
	p := &prompt{model: r.model}
	if aerr := responsesPrompt(top, &r, p, prev); aerr != nil {
		return responsesRequest{}, aerr
	}
	r.prompt = p
	r.inputTokens = p.tokens()
	return r, nil
}

// responsesPrompt reads a Responses body's prompt into r and p: its
// tools, instructions, previous turn and input.
func responsesPrompt(top map[string]json.RawMessage, r *responsesRequest, p *prompt, prev func(id string) (*prompt, *apiError)) *apiError {
	if present(top["tools"]) {
		var tools []json.RawMessage
		if json.Unmarshal(top["tools"], &tools) != nil {
			return openAIInvalid("tools", "invalid_type", "Invalid type for 'tools': expected an array.")
		}
		r.tools = top["tools"]
		p.add(string(top["tools"]))
	}
	if present(top["instructions"]) {
		var s string
		if json.Unmarshal(top["instructions"], &s) != nil {
			return openAIInvalid("instructions", "invalid_type", "Invalid type for 'instructions': expected a string.")
		}
		r.instructions = &s
		p.add(s)
	}
	r.convoFrom = len(p.blocks)
	if present(top["previous_response_id"]) {
		if json.Unmarshal(top["previous_response_id"], &r.previousID) != nil || r.previousID == "" {
			return openAIInvalid("previous_response_id", "invalid_type",
				"Invalid type for 'previous_response_id': expected a string.")
		}
		convo, aerr := prev(r.previousID)
		if aerr != nil {
			return aerr
		}
		p.addAll(convo)
	}
	if present(top["input"]) {
		items, aerr := responseItems(top["input"], p)
		if aerr != nil {
			return aerr
		}
		r.items = items
	}
	return nil
}
