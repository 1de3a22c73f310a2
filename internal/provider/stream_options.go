package provider

import (
	"bytes"
	"encoding/json"

	"github.com/sluicehq/sluice/internal/llm"
)

// EnsureStreamUsage makes an OpenAI streaming request ask for the final
// usage chunk (stream_options.include_usage: true), so the gateway can
// reconcile the quota with what the stream really used. It returns the body
// to send and whether it changed it. Anthropic bodies, non-streaming bodies,
// bodies that already ask for usage and bodies it cannot read (left for the
// estimate to reject) come back unchanged. All other fields are preserved;
// key order may change.
func EnsureStreamUsage(p llm.Protocol, body []byte) ([]byte, bool) {
	if p != llm.OpenAI {
		return body, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return body, false
	}
	var stream bool
	if raw, ok := top["stream"]; !ok || json.Unmarshal(raw, &stream) != nil || !stream {
		return body, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := top["stream_options"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &opts) != nil || opts == nil {
			return body, false
		}
	}
	var include bool
	if raw, ok := opts["include_usage"]; ok && json.Unmarshal(raw, &include) == nil && include {
		return body, false
	}
	opts["include_usage"] = json.RawMessage("true")
	optsJSON, err := marshalNoEscape(opts)
	if err != nil {
		return body, false
	}
	top["stream_options"] = optsJSON
	out, err := marshalNoEscape(top)
	if err != nil {
		return body, false
	}
	return out, true
}

// marshalNoEscape marshals v without escaping <, > and & so that prompt
// text passes through byte for byte.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
