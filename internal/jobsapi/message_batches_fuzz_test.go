package jobsapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseMessageBatch: whatever the body of a Message Batches create,
// parsing never panics, and what it accepts is a non-empty set of requests
// with unique custom_ids matching Anthropic's pattern and JSON-object
// params.
func FuzzParseMessageBatch(f *testing.F) {
	for _, seed := range []string{
		`{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"messages":[]}}]}`,
		`{"requests":[{"custom_id":"a","params":{}},{"custom_id":"a","params":{}}]}`,
		`{"requests":[]}`, `{"requests":[{"custom_id":"` + "has space" + `","params":{}}]}`,
		`{"requests":[{"params":{"stream":true}}]}`, `[]`, `null`, ``, `{"requests":[{"custom_id":"x","params":[1]}]}`,
	} {
		f.Add([]byte(seed))
	}
	a := &API{cfg: Config{MaxBatchJobs: 50}}
	f.Fuzz(func(t *testing.T, body []byte) {
		lines, err := a.parseMessageBatch(body)
		if err != nil {
			require.Nil(t, lines)
			return
		}
		require.NotEmpty(t, lines)
		require.LessOrEqual(t, len(lines), 50)
		seen := map[string]bool{}
		for _, l := range lines {
			require.Regexp(t, customIDPattern, l.CustomID)
			require.False(t, seen[l.CustomID], l.CustomID)
			seen[l.CustomID] = true
			var obj map[string]any
			require.NoError(t, json.Unmarshal(l.Body, &obj))
		}
	})
}
