package mock

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseRequests feeds arbitrary bodies to every request parser
// (Anthropic messages, chat completions, responses, embeddings): they must
// never panic, and what they accept must be self-consistent.
func FuzzParseRequests(f *testing.F) {
	for _, seed := range []string{
		anthropicBody, openAIBody,
		`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image","source":{}}]}],"tools":[{"name":"get_weather","input_schema":{}}]}`,
		`{"model":"gpt-4o-mini","n":2,"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]}]}`,
		`{"model":`, `null`, `[]`, `{"messages":[null]}`, `{"model":"m","max_tokens":-1,"messages":[{}]}`,
		`{"model":"claude-opus-5","max_tokens":9,"cache_control":{"type":"ephemeral","ttl":"1h"},"messages":[{"role":"user","content":[]}]}`,
		`{"model":"gpt-4.1","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image"}]},{"type":"function_call_output","output":"1"}],"tools":[{"type":"function","name":"f"}],"max_output_tokens":16,"reasoning":{"effort":"low"},"prompt_cache_key":"k","service_tier":"flex"}`,
		`{"model":"text-embedding-3-small","input":[[1,2],[3]],"dimensions":8,"encoding_format":"base64"}`,
		`{"model":"e","input":["a",""]}`, `{"model":"gpt-4.1","previous_response_id":"resp_1"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if r, err := parseAnthropic(body, true); err == nil {
			require.Positive(t, r.inputTokens)
			require.Positive(t, r.maxTokens)
			require.NotEmpty(t, r.model)
			require.Equal(t, r.prompt.tokens(), r.inputTokens)
			require.LessOrEqual(t, len(r.prompt.breakpoints()), maxAnthropicBreakpoints)
			for _, x := range r.prompt.blockPrefixes() {
				require.LessOrEqual(t, x.tokens(), r.inputTokens)
			}
		} else {
			require.Equal(t, 400, err.status)
			require.Equal(t, "invalid_request_error", err.typ)
		}
		if r, err := parseOpenAI(body, 4096); err == nil {
			require.Positive(t, r.inputTokens)
			require.Positive(t, r.maxTokens)
			require.GreaterOrEqual(t, r.n, 1)
		} else {
			require.Equal(t, 400, err.status)
		}
		prev := func(id string) (*prompt, *apiError) {
			if id == "resp_1" {
				p := &prompt{}
				p.add("earlier turn")
				return p, nil
			}
			return nil, openAIInvalid("previous_response_id", "previous_response_not_found", "not found")
		}
		if r, err := parseResponses(body, 4096, prev); err == nil {
			require.Equal(t, r.prompt.tokens(), r.inputTokens)
			require.GreaterOrEqual(t, r.maxTokens, int64(minMaxOutputTokens))
			require.LessOrEqual(t, r.convoFrom, len(r.prompt.blocks))
			require.False(t, r.background && !r.store)
			for _, it := range r.items {
				require.NotEmpty(t, it["id"])
			}
		} else {
			require.Equal(t, 400, err.status)
		}
		if r, err := parseInputTokens(body, prev); err == nil {
			require.Equal(t, r.prompt.tokens(), r.inputTokens)
			if created, err := parseResponses(body, 4096, prev); err == nil {
				require.Equal(t, created.inputTokens, r.inputTokens, "the count is the create's input")
			}
		} else {
			require.Equal(t, 400, err.status)
		}
		if r, err := parseEmbeddings(body); err == nil {
			require.NotEmpty(t, r.inputs)
			require.LessOrEqual(t, len(r.inputs), maxEmbeddingInputs)
			require.Positive(t, r.dimensions)
			var sum int64
			for _, in := range r.inputs {
				require.Positive(t, in.tokens)
				sum += in.tokens
			}
			require.Equal(t, sum, r.inputTokens)
		} else {
			require.Equal(t, 400, err.status)
		}
	})
}

// FuzzOutputTokensHeader: the X-Mock-Output-Tokens parser never panics and
// accepts only what it documents.
func FuzzOutputTokensHeader(f *testing.F) {
	for _, seed := range []string{"1", " 250 ", "0", "-1", "1000000", "1000001", "9223372036854775808", "1e3", "", "x"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, proto := range []string{protoAnthropic, protoOpenAI} {
			n, err := outputTokensHeader(http.Header{HeaderOutputTokens: {v}}, proto)
			if err != nil {
				require.Equal(t, 400, err.status)
				require.Zero(t, n)
				continue
			}
			require.GreaterOrEqual(t, n, int64(1))
			require.LessOrEqual(t, n, int64(OutputTokensHeaderMax))
		}
	})
}

// FuzzBatchCreate feeds arbitrary bodies to both batch creates (an
// Anthropic body, and an OpenAI input file): never a panic, never a 5xx,
// and a batch that was made holds one line per request.
func FuzzBatchCreate(f *testing.F) {
	f.Add([]byte(batchBody(2)))
	f.Add([]byte(openAIBatchFile("/v1/chat/completions", 2)))
	f.Add([]byte(`{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":1,"stream":true,"messages":[{"role":"user","content":"x"}]}}]}`))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}}` + "\n\n{"))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := New(Config{Batch: BatchConfig{Processing: 0, ErrorRate: 0.5}})
		require.NoError(t, err)
		w := call(s, http.MethodPost, messageBatchesPath, map[string]string{"x-api-key": "k"}, string(body))
		require.Less(t, w.Code, 500, w.Body.String())
		if w.Code == http.StatusOK {
			var b struct {
				RequestCounts struct{ Processing int } `json:"request_counts"`
			}
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &b))
			require.Positive(t, b.RequestCounts.Processing)
		}
		s.batches.files["file-f"] = &mockFile{id: "file-f", key: "k", purpose: "batch", content: body}
		for _, ep := range openAIBatchEndpoints {
			w = call(s, http.MethodPost, openAIBatchesPath, map[string]string{"Authorization": "Bearer k"},
				`{"input_file_id":"file-f","endpoint":"`+ep+`","completion_window":"24h"}`)
			require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			var b openAIBatchObject
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &b))
			require.True(t, (b.Status == "failed") == (b.Errors != nil), w.Body.String())
			require.True(t, b.Status == "failed" || b.RequestCounts.Total > 0, w.Body.String())
		}
	})
}
