package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// upperCounter is a TokenCounter other than ByteCounter, so that the scanner's
// decoded-string path is compared too.
type upperCounter struct{}

func (upperCounter) CountTokens(s string) int64 { return int64(len(s) + strings.Count(s, "a")) }

// scanSeeds are bodies covering the scanner's paths and its hand-offs to the
// reference.
var scanSeeds = []string{
	anthropicRequest,
	openAIRequest,
	`{"model":"m","max_tokens":10,"tools":[{"name":"t","input_schema":{}}],"messages":[{"role":"user","content":[{"type":"image"},{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}]}`,
	`{"model":"m","n":0,"messages":[]}`,
	`[`,
	`{"model":"m","messages":[{"content":[{"type":"text","text":5}]}]}`,
	`{"model":"m","max_tokens":3,"system":[{"type":"text","text":"s\u00e9\ud83d\ude00\ud800x\n"}],"messages":[null,{"role":"user","content":"caf` + "\xc3\xa9 \xff\xed\xa0\x80" + `"}]}`,
	`{"model":"m","max_tokens":3,"messages":[{"role":"user","Content":"x"}]}`,
	`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x","content":"yy"}]}`,
	`{"model":"m","max_completion_tokens":7,"max_tokens":"x","n":3,"system":5,"messages":[{"role":"user","name":"bob","tool_calls":[{"id":1}],"content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"input_audio","x":[1,2.5e3,-0.1,true,false,null]}]}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[null,{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]}`,
	`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"t","input":{"a":1}},{"type":"thinking","thinking":"hm"},{"type":"redacted_thinking","data":"zz"},{"type":"document","source":{"type":"text","data":"doc"}}]}]}`,
	`{"model":"m","max_tokens":99999999999999999999,"messages":[{"content":"x"}]}`,
	`{"model":"\u006d","max_tokens":1e3,"stream":true,"messages":[{"content":"x"}]}`,
	` {"model" : "m" , "max_tokens" : 5 , "stream" : false , "messages" : [ { "content" : [ { "text" : "a" , "type" : "text" } ] } ] } `,
	`{"model":"m","max_tokens":5,"messages":[{"content":"x"}]} x`,
	`{"model":"m","max_tokens":5,"messages":[{"content":"x"}],}`,
	`{"model":"m","max_tokens":05,"messages":[{"content":"x"}]}`,
	`null`,
	`{"model":"m","max_tokens":5,"messages":[{"content":[{"type":"tool_result","content":[{"type":"tool_result","content":"deep"}]}]}]}`,
	`{"model":"gpt-4.1","service_tier":"flex","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"claude-x","max_tokens":8,"service_tier":"st\u0061ndard_only","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"gpt-4.1","service_tier":7,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"gpt-4.1","service_tier":null,"service_tier":"priority","messages":[]}`,
}

func FuzzEstimateMatchesReference(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(true, []byte(s))
		f.Add(false, []byte(s))
	}
	f.Fuzz(func(t *testing.T, anthropic bool, body []byte) {
		p := llm.OpenAI
		if anthropic {
			p = llm.Anthropic
		}
		for _, tc := range []provider.TokenCounter{provider.ByteCounter{}, provider.ByteCounter{BytesPerToken: 3}, upperCounter{}} {
			want, wantErr := provider.EstimateReference(p, body, tc)
			got, gotErr := provider.EstimateWith(p, body, tc)
			require.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(gotErr), "error for %q", body)
			require.Equal(t, want, got, "cost for %q", body)
			if fast, ok := provider.ScanEstimate(p, body, tc); ok {
				require.NoError(t, wantErr, "the scanner priced a body the reference rejects: %q", body)
				require.Equal(t, want, fast, "cost for %q", body)
			}
		}
	})
}

// TestScanEstimateTakesTheCommonBodies checks that the usual bodies are
// priced by the scanner itself, not handed to the reference.
func TestScanEstimateTakesTheCommonBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    llm.Protocol
		body string
	}{
		{llm.Anthropic, anthropicRequest},
		{llm.OpenAI, openAIRequest},
		{llm.Anthropic, scanSeeds[6]},
		{llm.OpenAI, scanSeeds[9]},
		{llm.OpenAI, scanSeeds[10]},
	} {
		_, ok := provider.ScanEstimate(tc.p, []byte(tc.body), provider.ByteCounter{})
		require.True(t, ok, "%s", tc.body)
	}
}

func TestScanEstimateAllocatesOnlyTheModel(t *testing.T) {
	body := []byte(anthropicRequest)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := provider.Estimate(llm.Anthropic, body); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 1.0)
}
