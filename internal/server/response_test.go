package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
)

// chunkBody is a response body fed one chunk at a time by the test.
type chunkBody struct {
	chunks chan []byte
	closed chan struct{}
	once   sync.Once
	rest   []byte
}

func newChunkBody() *chunkBody {
	return &chunkBody{chunks: make(chan []byte), closed: make(chan struct{})}
}

func (b *chunkBody) Read(p []byte) (int, error) {
	if len(b.rest) == 0 {
		select {
		case c, ok := <-b.chunks:
			if !ok {
				return 0, io.EOF
			}
			b.rest = c
		case <-b.closed:
			return 0, io.ErrClosedPipe
		}
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

func (b *chunkBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func TestStreamingFlushesEachChunk(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	body := newChunkBody()
	ts.a.do = func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return &dispatch.Response{Response: &http.Response{
			StatusCode: 200,
			Header:     http.Header{"Content-Type": {"text/event-stream"}},
			Body:       body,
		}, Attempts: 1}, nil
	}
	req, err := http.NewRequestWithContext(t.Context(), "POST", ts.http.URL+"/a/v1/messages", strings.NewReader(`{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := ts.http.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	first := "event: message_start\ndata: {}\n\n"
	body.chunks <- []byte(first)
	// The first event must arrive while the second has not been produced.
	got := make([]byte, len(first))
	_, err = io.ReadFull(resp.Body, got)
	require.NoError(t, err)
	require.Equal(t, first, string(got))
	last := "event: message_stop\ndata: {}\n\n"
	body.chunks <- []byte(last)
	close(body.chunks)
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, last, string(rest))
}

func TestStreamInterruptedGetsErrorEvent(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	ts.a.do = func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		return &dispatch.Response{Response: &http.Response{
			StatusCode: 200,
			Header:     http.Header{"Content-Type": {"text/event-stream"}},
			Body:       io.NopCloser(io.MultiReader(strings.NewReader("event: ping\ndata: {}\n\n"), errReader{})),
		}, Attempts: 1}, nil
	}
	_, body := ts.do(t, "POST", "/a/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Contains(t, string(body), "event: ping")
	require.Contains(t, string(body), "event: error")
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestClientDisconnectCancelsAndClosesUpstream(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil)
	body := newChunkBody()
	ctxDone := make(chan struct{})
	ts.a.do = func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		go func() {
			<-ctx.Done()
			close(ctxDone)
		}()
		return &dispatch.Response{Response: &http.Response{
			StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body,
		}}, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, "POST", ts.http.URL+"/a/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	resp, err := ts.http.Client().Do(req)
	require.NoError(t, err)
	body.chunks <- []byte("data: 1\n\n")
	_, err = io.ReadFull(resp.Body, make([]byte, 9))
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	<-ctxDone     // the engine's context was cancelled
	<-body.closed // and the upstream body closed
}

func TestOpenAIStreamUsageStripped(t *testing.T) {
	t.Parallel()
	const stream = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1,\"total_tokens\":10}}\n\n" +
		"data: [DONE]\n\n"
	for _, tc := range []struct {
		name      string
		body      string
		wantUsage bool
	}{
		{"not asked: injected and stripped", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"asked: kept", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := newTestServer(t, nil)
			ts.o.do = func(_ context.Context, req *dispatch.Request) (*dispatch.Response, error) {
				var v struct {
					StreamOptions struct {
						IncludeUsage bool `json:"include_usage"`
					} `json:"stream_options"`
				}
				if err := json.Unmarshal(req.Body, &v); err != nil || !v.StreamOptions.IncludeUsage {
					return nil, fmt.Errorf("engine got a body without include_usage: %s", req.Body)
				}
				return &dispatch.Response{Response: &http.Response{
					StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
					Body: io.NopCloser(strings.NewReader(stream)),
				}, Attempts: 1}, nil
			}
			resp, body := ts.do(t, "POST", "/o/v1/chat/completions", tc.body, nil)
			require.Equal(t, 200, resp.StatusCode, "body: %s", body)
			require.Contains(t, string(body), `"content":"Hi"`)
			require.Contains(t, string(body), "data: [DONE]")
			require.Equal(t, tc.wantUsage, strings.Contains(string(body), "prompt_tokens"))
		})
	}
}
