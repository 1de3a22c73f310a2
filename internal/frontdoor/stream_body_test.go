package frontdoor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

const (
	aStart = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"
	aEnd = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	aOverloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	oStart      = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n"
	oEnd        = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\ndata: [DONE]\n\n"
)

// sseUpstream writes body, then, with hang, waits until the caller goes
// away; with abort it breaks the connection.
func sseUpstream(t *testing.T, body string, hang, abort bool) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
		w.(http.Flusher).Flush()
		if abort {
			panic(http.ErrAbortHandler)
		}
		if hang {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestStreamBodyEndings: whatever ends a stream, the prepared body ends
// with a terminal event, except when the caller itself went away.
func TestStreamBodyEndings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		p           llm.Protocol
		upstream    string
		abort, hang bool
		cancel      error // the caller's context is canceled with this cause after the first read
		stop        bool  // the dispatcher is stopped after the first read
		wantTail    string
		wantErr     bool
	}{
		{name: "anthropic complete", p: llm.Anthropic, upstream: aStart + aEnd, wantTail: aEnd},
		{name: "anthropic upstream error event passed on", p: llm.Anthropic, upstream: aStart + aOverloaded, wantTail: aOverloaded},
		{name: "anthropic eof without message_stop", p: llm.Anthropic, upstream: aStart, wantTail: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream stream ended before its final event; retry the request\"}}\n\n"},
		{name: "anthropic reset, half an event dropped", p: llm.Anthropic, upstream: aStart + "event: content_block_delta\ndata: {\"type\":\"con", abort: true, wantTail: "\"text\":\"Hel\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream stream was interrupted before its end; retry the request\"}}\n\n"},
		{name: "anthropic cut at shutdown (context cause)", p: llm.Anthropic, upstream: aStart, hang: true, cancel: fmt.Errorf("gateway shutting down: %w", dispatch.ErrStopped), wantTail: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"the gateway is shutting down: the stream was cut before its end; retry the request\"}}\n\n"},
		{name: "anthropic cut by Dispatcher.Stop", p: llm.Anthropic, upstream: aStart, hang: true, stop: true, wantTail: "\"type\":\"overloaded_error\",\"message\":\"the gateway is shutting down: the stream was cut before its end; retry the request\"}}\n\n"},
		{name: "anthropic caller went away: quiet", p: llm.Anthropic, upstream: aStart, hang: true, cancel: context.Canceled, wantTail: "\"text\":\"Hel\"}}\n\n", wantErr: true},
		{name: "openai complete", p: llm.OpenAI, upstream: oStart + oEnd, wantTail: "data: [DONE]\n\n"},
		{name: "openai eof without [DONE]", p: llm.OpenAI, upstream: oStart, wantTail: "data: {\"error\":{\"message\":\"the upstream stream ended before its final event; retry the request\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"},
		{name: "openai reset", p: llm.OpenAI, upstream: oStart, abort: true, wantTail: "data: {\"error\":{\"message\":\"the upstream stream was interrupted before its end; retry the request\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"},
		{name: "openai cut by Dispatcher.Stop", p: llm.OpenAI, upstream: oStart, hang: true, stop: true, wantTail: "data: {\"error\":{\"message\":\"the gateway is shutting down: the stream was cut before its end; retry the request\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := sseUpstream(t, tt.upstream, tt.hang, tt.abort)
			d := startDispatcher(t, tt.p, up.URL, nil)
			req := &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Header: http.Header{}, Body: []byte(`{}`)}
			if tt.p == llm.OpenAI {
				req.Path = "/v1/chat/completions"
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			resp, err := d.Do(ctx, req)
			require.NoError(t, err)
			frontdoor.PrepareResponse(req, resp)
			first := make([]byte, 16)
			_, err = io.ReadFull(resp.Body, first)
			require.NoError(t, err)
			switch {
			case tt.cancel != nil:
				cancel(tt.cancel)
			case tt.stop:
				require.NoError(t, d.Stop(context.Background()))
			}
			rest, err := io.ReadAll(resp.Body)
			require.NoError(t, resp.Body.Close())
			if tt.wantErr {
				require.ErrorIs(t, err, tt.cancel)
			} else {
				require.NoError(t, err)
			}
			got := string(first) + string(rest)
			require.True(t, strings.HasSuffix(got, tt.wantTail), "got %q", got)
			_, cut := frontdoor.StreamCut(resp.Body)
			require.Equal(t, !tt.wantErr && strings.Contains(tt.wantTail, "retry the request"), cut)
		})
	}
}

// TestTransportStreamCutByStopRaisesInTheSDKs: in-process callers (the
// Transport) get the same ending as the gateway's clients: a stream cut
// by the dispatcher's Stop makes both official SDKs' iterators return an
// error, never a truncated message.
func TestTransportStreamCutByStopRaisesInTheSDKs(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			body := aStart
			if p == llm.OpenAI {
				body = oStart
			}
			d := startDispatcher(t, p, sseUpstream(t, body, true, false).URL, nil)
			hc := &http.Client{Transport: frontdoor.NewTransport(d)}
			var next func() bool
			var errf func() error
			if p == llm.Anthropic {
				c := anthropic.NewClient(aoption.WithHTTPClient(hc), aoption.WithAPIKey("x"), aoption.WithMaxRetries(0))
				s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 32,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
				defer s.Close()
				next, errf = s.Next, s.Err
			} else {
				c := openai.NewClient(ooption.WithHTTPClient(hc), ooption.WithAPIKey("x"), ooption.WithMaxRetries(0))
				s := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
				defer s.Close()
				next, errf = s.Next, s.Err
			}
			require.True(t, next(), "the first event arrives: %v", errf())
			require.NoError(t, d.Stop(context.Background()))
			for next() {
			}
			err := errf()
			require.Error(t, err, "the SDK raises")
			require.Contains(t, err.Error(), "shutting down")
			var ae *anthropic.Error
			require.Equal(t, p == llm.Anthropic, errors.As(err, &ae))
		})
	}
}
