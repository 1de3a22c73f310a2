package batches

import (
	"encoding/json"

	"github.com/sluicehq/sluice/internal/llm"
)

// A batch's size as Create sends it, which is what the providers bound
// (Anthropic: the create's body, 256 MB; OpenAI: the input file, 200 MB):
// BatchBytes(p) plus, for each line, its body (compacted) and
// LineBytes(p, endpoint, custom_id).

// LineBytes is what a line with customID adds to its batch beyond its
// body: on Anthropic its request object around the params and the comma
// before the next request; on OpenAI its JSONL line around the body
// ({"custom_id","method","url","body"} and the newline) for endpoint ("":
// the first of OpenAIEndpoints).
func LineBytes(p llm.Protocol, endpoint, customID string) int64 {
	id, _ := json.Marshal(customID) // a string always encodes
	if p == llm.OpenAI {
		if endpoint == "" {
			endpoint = OpenAIEndpoints[0]
		}
		ep, _ := json.Marshal(endpoint)
		return int64(len(`{"custom_id":`) + len(id) + len(`,"method":"POST","url":`) + len(ep) + len(`,"body":`) + len("}\n"))
	}
	return int64(len(`{"custom_id":`) + len(id) + len(`,"params":`) + len(`}`) + len(`,`))
}

// BatchBytes is what a batch adds beyond its lines (LineBytes): on
// Anthropic the {"requests":[…]} around them, less the comma its last
// request has none of; nothing on OpenAI (the file is its lines).
func BatchBytes(p llm.Protocol) int64 {
	if p == llm.OpenAI {
		return 0
	}
	return int64(len(`{"requests":[`) + len(`]}`) - len(`,`))
}
