package provider

import "encoding/json"

// ResponseID returns the id of the Response object body (a POST
// /v1/responses answer), or "" when body is not one.
func ResponseID(body []byte) string {
	var r struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	if json.Unmarshal(body, &r) != nil || r.Object != "response" {
		return ""
	}
	return r.ID
}
