package scenario

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestGenerateMix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    Workload
		want [llm.NumPriorities]int
	}{
		{"default mix of 1000", Workload{Requests: 1000}, [4]int{100, 200, 500, 200}},
		{"largest remainder keeps the total", Workload{Requests: 7}, [4]int{1, 1, 4, 1}},
		{"one class only", Workload{Requests: 9, Mix: Mix{0, 0, 1, 0}}, [4]int{0, 0, 9, 0}},
		{"unnormalized shares", Workload{Requests: 30, Mix: Mix{1, 1, 1, 0}}, [4]int{10, 10, 10, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			items, err := Generate(tc.w)
			require.NoError(t, err)
			var got [llm.NumPriorities]int
			for i, it := range items {
				require.Equal(t, i, it.Index)
				got[it.Priority]++
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestGenerateShares(t *testing.T) {
	t.Parallel()
	items, err := Generate(Workload{Requests: 400, StreamShare: 0.25, OpenAIShare: 0.1, InputTokensMin: 10, InputTokensMax: 20, MaxTokens: 7, Seed: 3})
	require.NoError(t, err)
	var streams, openai int
	for _, it := range items {
		if it.Stream {
			streams++
		}
		if it.Protocol == llm.OpenAI {
			openai++
		}
		require.GreaterOrEqual(t, it.InputTokens, 10)
		require.LessOrEqual(t, it.InputTokens, 20)
		require.Equal(t, 7, it.MaxTokens)
		require.Zero(t, it.At, "Rate 0 means everything arrives at once")
	}
	require.Equal(t, 100, streams)
	require.Equal(t, 40, openai)
}

func TestGenerateReproducible(t *testing.T) {
	t.Parallel()
	w := Workload{Requests: 50, StreamShare: 0.5, Rate: 10, Seed: 9}
	a, err := Generate(w)
	require.NoError(t, err)
	b, err := Generate(w)
	require.NoError(t, err)
	require.Equal(t, a, b)
	w.Seed = 10
	c, err := Generate(w)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
}

func TestGeneratePoissonRate(t *testing.T) {
	t.Parallel()
	const rate, n = 20.0, 20000
	items, err := Generate(Workload{Requests: n, Rate: rate, Seed: 5})
	require.NoError(t, err)
	for i := 1; i < n; i++ {
		require.GreaterOrEqual(t, items[i].At, items[i-1].At, "arrivals are in order")
	}
	// The mean of n exponential gaps has a relative standard deviation of
	// 1/sqrt(n) < 1%; 3% is over four of them.
	mean := items[n-1].At.Seconds() / (n - 1)
	require.InEpsilon(t, 1/rate, mean, 0.03)
}

func TestGenerateNormalInput(t *testing.T) {
	t.Parallel()
	const n = 20000
	items, err := Generate(Workload{Requests: n, InputTokensMin: 100, InputTokensMax: 900, InputTokensStdDev: 100, Seed: 9})
	require.NoError(t, err)
	var sum, sq float64
	for _, it := range items {
		require.GreaterOrEqual(t, it.InputTokens, 100)
		require.LessOrEqual(t, it.InputTokens, 900)
		sum += float64(it.InputTokens)
		sq += float64(it.InputTokens) * float64(it.InputTokens)
	}
	mean := sum / n
	// N(500, 100): the sample mean's standard error is 100/sqrt(n) < 1.
	require.InDelta(t, 500, mean, 4)
	require.InDelta(t, 100, math.Sqrt(sq/n-mean*mean), 3)
}

func TestGenerateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		w    Workload
		msg  string
	}{
		{"negative requests", Workload{Requests: -1}, "Requests"},
		{"negative share", Workload{Mix: Mix{-1, 1, 1, 1}}, "Mix[critical]"},
		{"stream share over one", Workload{StreamShare: 1.5}, "StreamShare"},
		{"inverted token range", Workload{InputTokensMin: 50, InputTokensMax: 10}, "InputTokensMin"},
		{"negative rate", Workload{Rate: -2}, "Rate"},
		{"negative input spread", Workload{InputTokensStdDev: -1}, "InputTokensStdDev"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Generate(tc.w)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

func TestItemBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		it   Item
		want map[string]any
		path string
	}{
		{"anthropic", Item{Protocol: llm.Anthropic, InputTokens: 25, MaxTokens: 64, Seed: 1},
			map[string]any{"model": AnthropicModelDefault, "max_tokens": 64.0}, "/v1/messages"},
		{"anthropic stream", Item{Protocol: llm.Anthropic, InputTokens: 3, MaxTokens: 5, Stream: true},
			map[string]any{"stream": true, "max_tokens": 5.0}, "/v1/messages"},
		{"openai stream asks for usage", Item{Protocol: llm.OpenAI, InputTokens: 8, MaxTokens: 9, Stream: true},
			map[string]any{"model": OpenAIModelDefault, "max_completion_tokens": 9.0, "stream": true,
				"stream_options": map[string]any{"include_usage": true}}, "/v1/chat/completions"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got map[string]any
			require.NoError(t, json.Unmarshal(tc.it.Body(), &got))
			for k, v := range tc.want {
				require.Equal(t, v, got[k], k)
			}
			msgs := got["messages"].([]any)
			content := msgs[0].(map[string]any)["content"].(string)
			require.Len(t, content, 4*tc.it.InputTokens, "4 bytes per token, as the mock counts")
			require.Equal(t, tc.path, tc.it.Path())
			// The gateway's own estimate accepts the body.
			_, err := provider.Estimate(tc.it.Protocol, tc.it.Body())
			require.NoError(t, err)
		})
	}
}

func TestPromptDiffersBySeed(t *testing.T) {
	t.Parallel()
	a := Item{InputTokens: 100, Seed: 1}.Prompt()
	b := Item{InputTokens: 100, Seed: 2}.Prompt()
	require.NotEqual(t, a, b)
	require.Equal(t, a, Item{InputTokens: 100, Seed: 1}.Prompt())
	require.Len(t, a, 400)
}
