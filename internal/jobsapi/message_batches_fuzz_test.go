package jobsapi

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseMessageBatch: whatever the body of a Message Batches create,
// parsing it as it is read never panics, and what it accepts is valid
// JSON whose requests (read again whole, by encoding/json) are exactly
// the lines it returns: 1 to 50 of them, with unique custom_ids matching
// Anthropic's pattern and their params, compacted, as JSON objects.
func FuzzParseMessageBatch(f *testing.F) {
	for _, seed := range []string{
		`{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[]}}]}`,
		`{"requests":[{"custom_id":"a","params":{}},{"custom_id":"a","params":{}}]}`,
		`{"requests":[]}`, `{"requests":[{"custom_id":"` + "has space" + `","params":{}}]}`,
		`{"requests":[{"params":{"stream":true}}]}`, `[]`, `null`, ``, `{"requests":[{"custom_id":"x","params":[1]}]}`,
		`{"other":[1,{"a":2}],"requests":[{"custom_id":"b","params":{ "x" : 1 }}]} `, `{"requests":[5]}`,
		`{"requests":[{"custom_id":7,"params":{}}]}`, `{"requests":[{"custom_id":"a","params":{}}]}{}`,
		`{"requests":null}`, `{"requests":[{"custom_id":"a","params":null}]}`,
		`{"requests":[{"custom_id":"a","params":{}}],"Requests":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		lines, err := parseMessageBatch(bytes.NewReader(body), 50)
		if err != nil {
			require.Nil(t, lines)
			return
		}
		require.True(t, json.Valid(body), "accepted invalid JSON")
		// The body's keys are matched exactly (as Anthropic does), not
		// as encoding/json matches a struct's fields.
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &top))
		var whole struct {
			Requests []struct {
				CustomID string          `json:"custom_id"`
				Params   json.RawMessage `json:"params"`
			}
		}
		require.NoError(t, json.Unmarshal(top["requests"], &whole.Requests))
		require.Len(t, lines, len(whole.Requests))
		require.NotEmpty(t, lines)
		require.LessOrEqual(t, len(lines), 50)
		seen := map[string]bool{}
		for i, l := range lines {
			require.Equal(t, i, l.Line)
			require.Equal(t, whole.Requests[i].CustomID, l.CustomID)
			require.Regexp(t, customIDPattern, l.CustomID)
			require.False(t, seen[l.CustomID], l.CustomID)
			seen[l.CustomID] = true
			var want bytes.Buffer
			require.NoError(t, json.Compact(&want, whole.Requests[i].Params))
			require.Equal(t, want.String(), string(l.Body))
			var obj map[string]any
			require.NoError(t, json.Unmarshal(l.Body, &obj))
		}
	})
}
