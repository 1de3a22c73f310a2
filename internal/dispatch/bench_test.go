package dispatch_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	upcfg "github.com/sluicehq/sluice/upstream"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

const messageBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`

// BenchmarkDispatcherOverhead compares a request admitted at once through
// Do with a direct call to the same upstream.
func BenchmarkDispatcherOverhead(b *testing.B) {
	u := newUpstream(b, ok())
	defer u.Close()
	body := []byte(messageBody)
	client := &http.Client{}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodPost, u.URL+"/v1/messages", bytes.NewReader(body))
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
	b.Run("dispatcher", func(b *testing.B) {
		d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "bench", Protocol: llm.Anthropic, BaseURL: u.URL}, Clock: clock.Real(), HTTPClient: client})
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = d.Stop(context.Background()) }()
		for b.Loop() {
			resp, err := d.Do(context.Background(), &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Body: body, Priority: llm.Normal, Cost: provider.Cost{InputTokens: 20, OutputTokens: 100}})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
	})
	client.CloseIdleConnections()
}
