package provider_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func ExampleEstimate() {
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello, Claude"}]}`)
	cost, err := provider.Estimate(llm.Anthropic, body)
	fmt.Println(cost.Model, cost.InputTokens, cost.OutputTokens, err)

	_, err = provider.Estimate(llm.Anthropic, []byte(`{"model":"m","messages":[]}`))
	fmt.Println(err)
	// Output:
	// claude-sonnet-4-5 11 1024 <nil>
	// max_tokens: Field required (400 invalid_request_error)
}

func ExampleClassify() {
	now := time.Date(2025, 2, 24, 22, 25, 32, 0, time.UTC)
	body := []byte(`{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-abc on tokens per min (TPM): Limit 200000, Used 163084, Requested 62318. Please try again in 7.62s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
	o := provider.Classify(llm.OpenAI, http.StatusTooManyRequests, http.Header{}, body, now)
	fmt.Println(o.Kind, o.Code, o.RetryAfter)

	h := http.Header{}
	h.Set("retry-after", "Mon, 24 Feb 2025 22:26:32 GMT")
	d, ok := provider.ParseRetryAfter(h, now)
	fmt.Println(d, ok)
	// Output:
	// rate rate_limit_exceeded 7.62s
	// 1m0s true
}

func ExampleStreamObserver() {
	stream := "event: message_start\n" +
		`data: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	obs := provider.NewStreamObserver(llm.Anthropic)
	var client strings.Builder
	_, _ = io.Copy(io.MultiWriter(&client, obs), strings.NewReader(stream))
	u, ok := obs.Usage()
	fmt.Println(u.InputTokens, u.OutputTokens, ok, obs.Content(), obs.Done(), client.Len() == len(stream))
	// Output:
	// 25 15 true true true true
}
