package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	upcfg "github.com/sluicehq/sluice/upstream"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

// gatedUpstream streams one answer per request: the first content at once,
// then it waits. A request whose prompt says "finish" completes its stream
// (message_stop / [DONE]) once finish is closed; any other waits until the
// gateway goes away. started receives one value per stream whose first
// content was sent.
type gatedUpstream struct {
	*httptest.Server
	started chan llm.Protocol
	finish  chan struct{}
}

func newGatedUpstream(t *testing.T) *gatedUpstream {
	t.Helper()
	u := &gatedUpstream{started: make(chan llm.Protocol, 64), finish: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p := llm.Anthropic
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			p = llm.OpenAI
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if p == llm.OpenAI {
			_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}],"usage":null}`+"\n\n")
		} else {
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n")
		}
		w.(http.Flusher).Flush()
		u.started <- p
		if !strings.Contains(string(body), "finish") {
			<-r.Context().Done() // until the gateway cuts the stream
			return
		}
		select {
		case <-u.finish:
		case <-r.Context().Done():
			return
		}
		if p == llm.OpenAI {
			_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":null}`+"\n\n"+
				`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`+"\n\n"+
				"data: [DONE]\n\n")
		} else {
			_, _ = io.WriteString(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// streamResult is how one client's stream ended.
type streamResult struct {
	name     string
	terminal bool   // saw message_stop / [DONE]
	err      error  // the SDK's stream error, or the raw reader's
	last     string // raw clients: the last event
	status   int
	header   http.Header
}

// TestShutdownEndsEveryStream is the SIGTERM test: with streams in flight
// through both official SDKs and raw HTTP, and requests queued behind them,
// Stop answers the queued requests with 503 + retry-after at once, lets a
// stream that finishes within the grace end normally, and ends every
// stream still running at the end of the grace with the protocol's error
// event, so each SDK's iterator returns an error instead of a truncated
// message. The grace runs on a fake clock: it ends when the test says.
func TestShutdownEndsEveryStream(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	up := newGatedUpstream(t)
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	limits := upcfg.Limits{MaxConcurrency: 4}
	srv, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0", ShutdownGrace: grace,
		Upstreams: []upcfg.Config{
			{Name: "a", Protocol: llm.Anthropic, BaseURL: up.URL, APIKey: "k", Limits: limits},
			{Name: "o", Protocol: llm.OpenAI, BaseURL: up.URL, APIKey: "k", Limits: limits},
		}}, WithClock(fc), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	stopErr := make(chan error, 1)
	stopping := false
	t.Cleanup(func() { // also after a failed assertion: end the grace
		if !stopping {
			require.NoError(t, srv.Stop(context.Background()))
			return
		}
		var err error
		require.Eventually(t, func() bool {
			select {
			case err = <-stopErr:
				return true
			default:
				fc.Advance(grace) // the grace, and the wait for the cut answers, end
				return false
			}
		}, 30*time.Second, time.Millisecond, "Stop returns once the grace is over")
		require.NoError(t, err)
	})
	base := "http://" + srv.Addr()
	ac := anthropic.NewClient(aoption.WithBaseURL(base+"/a"), aoption.WithAPIKey("sk-client"), aoption.WithMaxRetries(0))
	oc := openai.NewClient(ooption.WithBaseURL(base+"/o/v1"), ooption.WithAPIKey("sk-client"), ooption.WithMaxRetries(0))

	results := make(chan streamResult, 16)
	firstEvent := make(chan struct{}, 16)
	anthropicSDK := func(name, prompt string) {
		s := ac.Messages.NewStreaming(context.Background(), messageParams(prompt))
		defer s.Close()
		r := streamResult{name: name}
		for first := true; s.Next(); first = false {
			if first {
				firstEvent <- struct{}{}
			}
			if s.Current().Type == "message_stop" {
				r.terminal = true
			}
		}
		r.err = s.Err()
		results <- r
	}
	openaiSDK := func(name, prompt string) {
		s := oc.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		defer s.Close()
		r := streamResult{name: name}
		var acc openai.ChatCompletionAccumulator
		for first := true; s.Next(); first = false {
			if first {
				firstEvent <- struct{}{}
			}
			acc.AddChunk(s.Current())
		}
		r.err = s.Err()
		// The SDK ends quietly only on [DONE]; the test's finisher sends
		// finish_reason "stop" just before it.
		r.terminal = r.err == nil && len(acc.Choices) == 1 && acc.Choices[0].FinishReason == "stop"
		results <- r
	}
	raw := func(name, path, body string, stream bool) {
		r := streamResult{name: name}
		defer func() { results <- r }()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			r.err = err
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			r.err = err
			return
		}
		defer resp.Body.Close()
		r.status, r.header = resp.StatusCode, resp.Header
		if !stream || resp.StatusCode != http.StatusOK {
			b, err := io.ReadAll(resp.Body)
			r.last, r.err = string(b), err
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Split(splitEvents)
		for first := true; sc.Scan(); first = false {
			if first {
				firstEvent <- struct{}{}
			}
			r.last = sc.Text()
			if strings.Contains(r.last, "message_stop") || strings.Contains(r.last, "[DONE]") {
				r.terminal = true
			}
		}
		r.err = sc.Err()
	}
	const (
		anthropicStream = `{"model":"claude-sonnet-4-5","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"hang"}]}`
		openaiStream    = `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hang"}]}`
	)

	// Four streams per upstream fill its concurrency: two through the SDK,
	// one raw, one that will finish within the grace.
	var wg sync.WaitGroup
	spawn := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	spawn(func() { anthropicSDK("anthropic sdk 1", "hang") })
	spawn(func() { anthropicSDK("anthropic sdk 2", "hang") })
	spawn(func() { anthropicSDK("anthropic sdk finisher", "finish") })
	spawn(func() { raw("anthropic raw", "/a/v1/messages", anthropicStream, true) })
	spawn(func() { openaiSDK("openai sdk 1", "hang") })
	spawn(func() { openaiSDK("openai sdk 2", "hang") })
	spawn(func() { openaiSDK("openai sdk finisher", "finish") })
	spawn(func() { raw("openai raw", "/o/v1/chat/completions", openaiStream, true) })
	for range 8 {
		<-up.started
		<-firstEvent // the stream reached its client
	}
	// Two more per upstream wait in the engines' queues.
	for i := range 2 {
		spawn(func() { raw(fmt.Sprintf("anthropic queued %d", i), "/a/v1/messages", anthropicStream, true) })
		spawn(func() { raw(fmt.Sprintf("openai queued %d", i), "/o/v1/chat/completions", openaiStream, true) })
	}
	queued := func(name string) int {
		snap := srv.upstreams[name].engine.(*dispatch.Dispatcher).Snapshot()
		return snap.Queued[llm.Normal]
	}
	require.Eventually(t, func() bool { return queued("a") == 2 && queued("o") == 2 }, 10*time.Second, time.Millisecond)

	go func() { stopErr <- srv.Stop(context.Background()) }()
	stopping = true

	got := map[string]streamResult{}
	// The queued requests are answered at once, while every stream still
	// runs (the grace has not moved on the fake clock).
	for range 4 {
		r := <-results
		require.Contains(t, r.name, "queued", "%s ended before the grace was over: %+v", r.name, r)
		require.Equal(t, http.StatusServiceUnavailable, r.status, r.last)
		require.Equal(t, "1", r.header.Get("Retry-After"))
		require.Equal(t, "true", r.header.Get("X-Should-Retry"))
		require.Contains(t, r.last, "shutting down")
		got[r.name] = r
	}
	// A stream that ends within the grace ends normally.
	close(up.finish)
	for range 2 {
		r := <-results
		require.Contains(t, r.name, "finisher")
		require.NoError(t, r.err, r.name)
		require.True(t, r.terminal, r.name)
		got[r.name] = r
	}
	// The grace ends: every stream still running gets the error event.
	fc.Advance(grace)
	wg.Wait()
	close(results)
	for r := range results {
		got[r.name] = r
		require.False(t, r.terminal, r.name)
		switch {
		case strings.HasPrefix(r.name, "anthropic sdk"):
			var apiErr *anthropic.Error
			require.ErrorAs(t, r.err, &apiErr, "%s: the SDK raises the error event", r.name)
			require.Contains(t, apiErr.Error(), "overloaded_error", r.name)
		case strings.HasPrefix(r.name, "openai sdk"):
			require.Error(t, r.err, r.name)
			require.Contains(t, r.err.Error(), "shutting down", r.name)
		case r.name == "anthropic raw":
			require.NoError(t, r.err)
			require.True(t, strings.HasPrefix(r.last, "event: error\ndata: "), r.last)
			require.Contains(t, r.last, `"type":"overloaded_error"`)
		case r.name == "openai raw":
			require.NoError(t, r.err)
			require.True(t, strings.HasPrefix(r.last, `data: {"error":`), r.last)
			require.Contains(t, r.last, `"type":"server_error"`)
		default:
			t.Fatalf("unexpected result %+v", r)
		}
	}
	require.Len(t, got, 12, "every client got an answer")
}

// splitEvents is a bufio.SplitFunc for SSE events (blank-line separated).
func splitEvents(data []byte, atEOF bool) (int, []byte, error) {
	if i := strings.Index(string(data), "\n\n"); i >= 0 {
		return i + 2, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
