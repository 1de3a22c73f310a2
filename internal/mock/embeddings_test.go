package mock

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func embed(s *Server, key, body string) (int, map[string]any, map[string]string) {
	w := call(s, "POST", "/v1/embeddings", map[string]string{"Authorization": "Bearer " + key}, body)
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	h := map[string]string{}
	for _, k := range []string{"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens"} {
		h[k] = w.Header().Get(k)
	}
	return w.Code, m, h
}

// vectorOf decodes one data entry's embedding, float array or base64.
func vectorOf(t *testing.T, d any) []float64 {
	t.Helper()
	switch e := d.(map[string]any)["embedding"].(type) {
	case []any:
		out := make([]float64, len(e))
		for i, x := range e {
			out[i] = x.(float64)
		}
		return out
	case string:
		b, err := base64.StdEncoding.DecodeString(e)
		require.NoError(t, err)
		out := make([]float64, len(b)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return out
	}
	t.Fatalf("unexpected embedding %v", d)
	return nil
}

func TestEmbeddings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		wantTokens int64
		wantN      int
		wantDims   int
	}{
		{"string", `{"model":"text-embedding-3-small","input":"hello world!"}`, 3, 1, 1536},
		{"strings", `{"model":"text-embedding-3-small","input":["abcd","abcdefgh"]}`, 3, 2, 1536},
		{"tokens", `{"model":"text-embedding-3-large","input":[1,2,3,4,5]}`, 5, 1, 3072},
		{"token arrays", `{"model":"text-embedding-ada-002","input":[[1,2],[3,4,5]]}`, 5, 2, 1536},
		{"dimensions", `{"model":"text-embedding-3-small","input":"abcd","dimensions":256}`, 1, 1, 256},
		{"base64", `{"model":"text-embedding-3-small","input":"abcd","encoding_format":"base64"}`, 1, 1, 1536},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Limits: Limits{RPM: 100, TPM: 1000}})
			code, m, h := embed(s, "k", tc.body)
			require.Equal(t, 200, code, m)
			require.Equal(t, "list", m["object"])
			require.Equal(t, map[string]any{"prompt_tokens": float64(tc.wantTokens), "total_tokens": float64(tc.wantTokens)}, m["usage"])
			data := m["data"].([]any)
			require.Len(t, data, tc.wantN)
			for i, d := range data {
				require.Equal(t, "embedding", d.(map[string]any)["object"])
				require.Equal(t, float64(i), d.(map[string]any)["index"])
				v := vectorOf(t, d)
				require.Len(t, v, tc.wantDims)
				var norm float64
				for _, x := range v {
					norm += x * x
				}
				require.InDelta(t, 1, norm, 1e-4, "unit vectors")
			}
			// Counted against RPM and TPM (input only, nothing reserved).
			require.Equal(t, "99", h["x-ratelimit-remaining-requests"])
			require.Equal(t, strconv.FormatInt(1000-tc.wantTokens, 10), h["x-ratelimit-remaining-tokens"])
			st := s.Stats().Keys["k"]
			require.Equal(t, Counts{Requests: 1, InputTokens: tc.wantTokens, Tokens: tc.wantTokens}, st.Admitted)
			require.Equal(t, int64(1), st.ByEndpoint[EndpointEmbeddings])
			// The same input gives the same vector, whatever the encoding.
			other := strings.Replace(tc.body, `,"encoding_format":"base64"`, "", 1)
			_, m2, _ := embed(s, "k", other)
			require.InDeltaSlice(t, vectorOf(t, data[0]), vectorOf(t, m2["data"].([]any)[0]), 0)
		})
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, param, msg string
	}{
		{"no input", `{"model":"text-embedding-3-small"}`, "input", "Missing required parameter: 'input'."},
		{"empty string", `{"model":"text-embedding-3-small","input":""}`, "input", "'$.input' is invalid"},
		{"empty array", `{"model":"text-embedding-3-small","input":[]}`, "input", "'$.input' is invalid"},
		{"mixed array", `{"model":"text-embedding-3-small","input":["a",1]}`, "input", "'$.input' is invalid"},
		{"too long", `{"model":"text-embedding-3-small","input":"` + strings.Repeat("x", 4*8193) + `"}`, "input", "maximum context length is 8192 tokens"},
		{"dimensions on ada", `{"model":"text-embedding-ada-002","input":"a","dimensions":8}`, "dimensions", "does not support specifying dimensions"},
		{"too many dimensions", `{"model":"text-embedding-3-small","input":"a","dimensions":2000}`, "dimensions", "between 1 and 1536"},
		{"bad encoding", `{"model":"text-embedding-3-small","input":"a","encoding_format":"hex"}`, "encoding_format", "supported values"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{})
			code, m, _ := embed(s, "k", tc.body)
			require.Equal(t, 400, code)
			e := m["error"].(map[string]any)
			require.Equal(t, tc.param, e["param"])
			require.Contains(t, e["message"], tc.msg)
		})
	}
}
