package mock

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOutputLengthDistribution(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		r                OutputRange
		maxTokens        int64
		wantMean, wantSD float64
		tolMean, tolSD   float64
		wantLo, wantHi   int64
	}{
		{"uniform", OutputRange{Min: 100, Max: 200}, 200, 150, 100 / math.Sqrt(12), 2, 2, 100, 200},
		{"normal", OutputRange{Min: 1, Mean: 150, StdDev: 30}, 400, 150, 30, 2, 2, 1, 400},
		// max_tokens cuts the tail: E[min(X, 160)] for X ~ N(150, 30) is 150 - 30 × 0.254.
		{"normal cut by max_tokens", OutputRange{Min: 1, Mean: 150, StdDev: 30}, 160, 142.4, 20.8, 1, 1, 1, 160},
		{"normal around the range's middle", OutputRange{Min: 40, Max: 60, StdDev: 5}, 200, 50, 5, 1, 1, 40, 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 20_000
			var sum, sq float64
			lo, hi := int64(math.MaxInt64), int64(0)
			for i := range n {
				v := outputLength(tc.r, 7, uint64(i)*0x9e3779b97f4a7c15, 0, tc.maxTokens)
				lo, hi = min(lo, v), max(hi, v)
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			mean := sum / n
			sd := math.Sqrt(sq/n - mean*mean)
			require.InDelta(t, tc.wantMean, mean, tc.tolMean)
			require.InDelta(t, tc.wantSD, sd, tc.tolSD)
			require.GreaterOrEqual(t, lo, tc.wantLo)
			require.LessOrEqual(t, hi, tc.wantHi)
		})
	}
}

// TestOutputTokensHeader: X-Mock-Output-Tokens fixes each reply's length
// at min(N, max_tokens) on both protocols, streamed or not, and a bad value
// is the mock's own 400 in the protocol's shape, before any quota is spent.
func TestOutputTokensHeader(t *testing.T) {
	t.Parallel()
	const anthropic = `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello there"}]}`
	const openai = `{"model":"gpt-4.1","max_completion_tokens":1024,"n":2,"messages":[{"role":"user","content":"Hello there"}]}`
	tests := []struct {
		name   string
		openAI bool
		body   string
		values []string
		status int
		want   int64 // output tokens per choice
	}{
		{name: "anthropic fixed", body: anthropic, values: []string{"37"}, status: 200, want: 37},
		{name: "anthropic cut by max_tokens", body: strings.Replace(anthropic, "1024", "16", 1), values: []string{"500"}, status: 200, want: 16},
		{name: "anthropic spaces", body: anthropic, values: []string{" 8 "}, status: 200, want: 8},
		{name: "anthropic stream", body: strings.Replace(anthropic, `"max_tokens"`, `"stream":true,"max_tokens"`, 1), values: []string{"12"}, status: 200, want: 12},
		{name: "openai fixed per choice", openAI: true, body: openai, values: []string{"21"}, status: 200, want: 21},
		{name: "anthropic zero", body: anthropic, values: []string{"0"}, status: 400},
		{name: "anthropic negative", body: anthropic, values: []string{"-3"}, status: 400},
		{name: "anthropic not a number", body: anthropic, values: []string{"lots"}, status: 400},
		{name: "anthropic too large", body: anthropic, values: []string{"1000001"}, status: 400},
		{name: "anthropic twice", body: anthropic, values: []string{"5", "6"}, status: 400},
		{name: "openai float", openAI: true, body: openai, values: []string{"2.5"}, status: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newMock(t, Config{Limits: Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000, TPM: 200_000}})
			path, key := "/v1/messages", http.Header{"X-Api-Key": {"k"}}
			if tc.openAI {
				path, key = "/v1/chat/completions", http.Header{"Authorization": {"Bearer k"}}
			}
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(tc.body))
			r.Header = key
			for _, v := range tc.values {
				r.Header.Add(HeaderOutputTokens, v)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, r)
			require.Equal(t, tc.status, w.Code, w.Body.String())
			if tc.status != 200 {
				m := decode(t, w.Body.Bytes())
				e := m["error"].(map[string]any)
				require.Equal(t, "invalid_request_error", e["type"])
				require.Contains(t, e["message"], HeaderOutputTokens)
				if tc.openAI {
					require.Equal(t, "invalid_value", e["code"])
				} else {
					require.Equal(t, "error", m["type"])
				}
				require.Zero(t, s.Stats().Overall.Admitted.Requests, "refused before admission")
				return
			}
			choices := int64(1)
			if tc.openAI {
				choices = 2
			}
			require.Equal(t, tc.want*choices, s.Stats().Overall.Admitted.OutputTokens)
		})
	}
}
