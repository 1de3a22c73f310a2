package jobsapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
)

// FuzzIdempotency: whatever the key and the client, a submit never answers
// 5xx; a key over jobsapi.MaxIdempotencyKeyLen is 400; the same key with the same
// request is the same job (200), with another request or upstream it is
// 409 naming the key, and another client's same key is its own job.
func FuzzIdempotency(f *testing.F) {
	for _, seed := range []struct{ key, client, text string }{
		{"k1", "alice", "hello"}, {"", "bob", "hi"}, {strings.Repeat("x", 300), "a", "t"},
		{"ключ", "c\x00", "\"quoted\""}, {"a b\tc", "", "ü"},
	} {
		f.Add(seed.key, seed.client, seed.text)
	}
	s := newService(f, nil, succeed(), nil, func(c *config) { c.Owner = "manual" }) // not started: nothing runs
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, key, client, text string) {
		key = fmt.Sprintf("%d:%s", n.Add(1), key) // each run its own keys
		request := func(text string) string {
			b, _ := json.Marshal(text)
			return `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":` + string(b) + `}]}`
		}
		submit := func(upstream, client, text string) (int, jobsapi.JobView, string) {
			k, _ := json.Marshal(key)
			body := `{"upstream":"` + upstream + `","idempotency_key":` + string(k) + `,"request":` + request(text) + `}`
			code, b := do(t, s.Handler(), "POST", "/v1/jobs", body, "X-Sluice-Client", client)
			require.Less(t, code, 500, string(b))
			var v jobsapi.JobView
			var e jobsapi.APIError
			if code < 300 {
				require.NoError(t, json.Unmarshal(b, &v), string(b))
			} else {
				require.NoError(t, json.Unmarshal(b, &e), string(b))
			}
			return code, v, e.Error.Message
		}
		code, first, _ := submit("claude", client, text)
		if len(key) > jobsapi.MaxIdempotencyKeyLen {
			require.Equal(t, http.StatusBadRequest, code)
			return
		}
		if code == http.StatusBadRequest {
			return // a body the provider check refuses (e.g. an invalid string)
		}
		require.Equal(t, http.StatusAccepted, code)
		code, again, _ := submit("claude", client, text)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, first.ID, again.ID)
		code, _, msg := submit("claude", client, text+"!")
		require.Equal(t, http.StatusConflict, code)
		require.Contains(t, msg, "idempotency key")
		code, _, _ = submit("gpt", client, text)
		require.Contains(t, []int{http.StatusConflict, http.StatusBadRequest}, code) // gpt speaks OpenAI: the body may not fit it
		code, other, _ := submit("claude", client+"~other", text)
		require.Equal(t, http.StatusAccepted, code)
		require.NotEqual(t, first.ID, other.ID)
	})
}
