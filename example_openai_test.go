package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice"
)

// Example_openAI sends Chat Completions through Sluice in-process with the
// official OpenAI SDK: an urgent request with a deadline goes at once; a
// background request whose deadline cannot be met within the upstream's
// quota (here 1 request a minute, already used) is refused at once with
// OpenAI's 429 instead of waiting past its deadline.
func Example_openAI() {
	// A stand-in for api.openai.com that answers one fixed completion.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini",
			"choices":[{"index":0,"message":{"role":"assistant","content":"Hello, sent with %s"},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}`, r.Header.Get("Authorization"))
	}))
	defer upstream.Close()

	t, err := sluice.NewTransport(sluice.Upstream{
		Name:     "openai",
		Protocol: sluice.OpenAI,
		BaseURL:  upstream.URL,
		APIKey:   "sk-upstream-key",
		Profile:  sluice.Latency,
		Limits:   sluice.Limits{RequestsPerMinute: 1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := t.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = t.Stop(ctx) }()

	client := openai.NewClient(
		option.WithHTTPClient(&http.Client{Transport: t}),
		option.WithAPIKey("the-app-never-needs-the-real-key"),
		option.WithMaxRetries(0), // Sluice retries; show its answers as they are
	)
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
	}

	urgent, cancel := context.WithTimeout(sluice.WithPriority(ctx, sluice.Critical), 10*time.Second)
	defer cancel()
	cc, err := client.Chat.Completions.New(urgent, params)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cc.Choices[0].Message.Content)
	fmt.Println(cc.Usage.PromptTokens, cc.Usage.CompletionTokens)

	background, cancel := context.WithTimeout(sluice.WithPriority(ctx, sluice.Low), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = client.Chat.Completions.New(background, params)
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, "at once:", time.Since(start) < time.Second)
	}
	// Output:
	// Hello, sent with Bearer sk-upstream-key
	// 9 5
	// 429 at once: true
}
