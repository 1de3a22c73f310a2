package sluice_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Example sends a Messages call through Sluice in-process: the official
// SDK gets Sluice as its HTTP transport, and the request is queued,
// admitted against the quotas and sent with the upstream's own key.
func Example() {
	// A stand-in for api.anthropic.com that answers one fixed message.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",
			"content":[{"type":"text","text":"Hello from %s"}],"stop_reason":"end_turn",
			"usage":{"input_tokens":12,"output_tokens":4}}`, r.Header.Get("X-Api-Key"))
	}))
	defer upstream.Close()

	t, err := sluice.NewTransport(sluice.Upstream{
		Name:     "anthropic",
		Protocol: sluice.Anthropic,
		BaseURL:  upstream.URL,
		APIKey:   "sk-upstream-key",
		Limits:   sluice.Limits{RequestsPerMinute: 50, InputTokensPerMinute: 30000, OutputTokensPerMinute: 8000},
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

	client := anthropic.NewClient(
		option.WithHTTPClient(&http.Client{Transport: t}),
		option.WithAPIKey("the-app-never-needs-the-real-key"),
	)
	msg, err := client.Messages.New(sluice.WithPriority(ctx, sluice.High), anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 256,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hi"))},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(msg.Content[0].Text)
	fmt.Println(msg.Usage.InputTokens, msg.Usage.OutputTokens)
	// Output:
	// Hello from sk-upstream-key
	// 12 4
}
