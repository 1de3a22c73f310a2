package frontdoor

import "encoding/json"

// RewriteModel returns body with its model replaced per models; body
// itself when the model is not listed or the body is not a JSON object.
func RewriteModel(body []byte, models map[string]string) []byte {
	if len(models) == 0 {
		return body
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	var model string
	if json.Unmarshal(m["model"], &model) != nil {
		return body
	}
	to, ok := models[model]
	if !ok {
		return body
	}
	b, err := json.Marshal(to)
	if err != nil {
		return body
	}
	m["model"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}
