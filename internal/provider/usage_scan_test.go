package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

var usageSeeds = []string{
	`{"id":"x","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":2,"cache_read_input_tokens":1}}`,
	`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`,
	`{"usage":{"input_tokens":7,"output_tokens":2,"input_tokens_details":{"cached_tokens":null}}}`,
	`{"usage":null}`, `{"usage":{}}`, `{"Usage":{"input_tokens":1}}`, `{"usage":{"input_tokens":1.5}}`,
	`{"usage":{"input_tokens":-3,"output_tokens":"4"}}`, `{"usage":{"input_tokens":1},"usage":{"output_tokens":2}}`,
	`{"usage":{"prompt_tokens":1,"prompt_tokens_details":null}}`, `[1]`, `{"a":[1,{"b":"\u00e9"}],"usage":{"output_tokens":9}} `,
	`{"usage":{"input_tokens":1}}x`, `{"usage":{"INPUT_tokens":1}}`, `{"usage":{"prompt_tokens_details":{"cached_tokens":1,"x":[]}}}`,
	anthropicCachedMessage, responsesObject, embeddingsList,
	`{"usage":{"input_tokens":5,"output_tokens":6,"cache_creation":"x","service_tier":7,"output_tokens_details":[1]}}`,
	`{"service_tier":{"x":1},"usage":{"prompt_tokens":1,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":null}}}`,
	`{"service_tier":"a","usage":{"input_tokens":1,"output_tokens":1,"service_tier":"b\u0061tch"}}`,
	`{"usage":{"input_tokens":1,"cache_creation":{"ephemeral_5m_input_tokens":2,"Ephemeral_1h_input_tokens":3}},"Service_Tier":"x"}`,
	`{"usage":{"output_tokens":1,"output_tokens_details":{"thinking_tokens":1.5,"reasoning_tokens":2}}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":3,"reasoning_tokens":4}},"service_tier":"flex"}`,
}

// FuzzUsageScanMatchesReference holds the usage scanner to encoding/json's
// answers wherever it answers.
func FuzzUsageScanMatchesReference(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, body string, openai bool) {
		p := llm.Anthropic
		if openai {
			p = llm.OpenAI
		}
		wu, wok := provider.ParseUsageReference(p, []byte(body))
		if su, sfound, ok := provider.ScanUsageDoc(p, []byte(body)); ok {
			require.Equal(t, wok, sfound, body)
			require.Equal(t, wu, su, body)
		}
		gu, gok := provider.ParseUsage(p, []byte(body))
		require.Equal(t, wok, gok)
		require.Equal(t, wu, gu)
	})
}

// FuzzOpenAIChunkScanMatchesReference holds the stream observer's chunk
// scanner to the reference handler's view.
func FuzzOpenAIChunkScanMatchesReference(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add(s)
	}
	for _, s := range []string{`{"choices":[]}`, `{"choices":null,"usage":{"prompt_tokens":3}}`, `{"choices":[null]}`,
		`{"choices":[1]}`, `{"error":{"message":"boom","type":"server_error"}}`, `{"error":null,"choices":[{}]}`,
		`{"choices":[],"service_tier":"flex","usage":{"prompt_tokens":3,"completion_tokens":1}}`,
		`{"choices":[{}],"service_tier":"default","usage":null}`, `{"service_tier":1,"usage":{"prompt_tokens":3}}`,
		`{"Service_tier":"x","usage":{"prompt_tokens":3}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, chunk string) {
		s, r, ok := provider.OpenAIChunkBoth([]byte(chunk))
		if !ok {
			return
		}
		su, sok := s.Usage()
		ru, rok := r.Usage()
		require.Equal(t, rok, sok, chunk)
		require.Equal(t, ru, su, chunk)
		require.Equal(t, r.Content(), s.Content(), chunk)
		se, sbad := s.StreamError()
		re, rbad := r.StreamError()
		require.Equal(t, rbad, sbad, chunk)
		require.Equal(t, re, se, chunk)
	})
}

// usageBody is a 92 KB chat completion with its usage last.
func usageBody() []byte {
	var sb strings.Builder
	sb.WriteString(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4.1","choices":[`)
	for i := range 40 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"index":%d,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}`, i, strings.Repeat("The quick brown fox jumps over the lazy dog. ", 51))
	}
	sb.WriteString(`],"usage":{"prompt_tokens":1200,"completion_tokens":22000,"prompt_tokens_details":{"cached_tokens":0}}}`)
	return []byte(sb.String())
}

func TestUsageBodyIsRead(t *testing.T) {
	t.Parallel()
	u, ok := provider.ParseUsage(llm.OpenAI, usageBody())
	require.True(t, ok)
	require.Equal(t, llm.Usage{InputTokens: 1200, OutputTokens: 22000}, u)
}

func BenchmarkParseUsage(b *testing.B) {
	body := usageBody()
	for _, tc := range []struct {
		name  string
		parse func(llm.Protocol, []byte) (llm.Usage, bool)
	}{{"scan", provider.ParseUsage}, {"reference", provider.ParseUsageReference}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := tc.parse(llm.OpenAI, body); !ok {
					b.Fatal("no usage")
				}
			}
		})
	}
}
