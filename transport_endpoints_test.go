package sluice_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// responsesUpstream stands in for api.openai.com's Responses and
// embeddings endpoints, recording each request's path and body.
type responsesUpstream struct {
	mu     sync.Mutex
	paths  []string
	bodies []string
}

func (u *responsesUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.paths = append(u.paths, r.URL.Path)
	u.bodies = append(u.bodies, string(b))
	u.mu.Unlock()
	const resp = `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello there","annotations":[]}]}],"service_tier":"flex","usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`
	switch {
	case r.URL.Path == "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,0.25]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":3,"total_tokens":3}}`)
	case strings.Contains(string(b), `"stream":true`):
		w.Header().Set("Content-Type", "text/event-stream")
		created := strings.Replace(strings.Replace(resp, `"completed"`, `"in_progress"`, 1), `"output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello there","annotations":[]}]}]`, `"output":[]`, 1)
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":%s}\n\n", created)
		fmt.Fprint(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"hello there\"}\n\n")
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":%s}\n\n", resp)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, resp)
	}
}

// TestTransportSchedulesResponsesAndEmbeddings: the in-process Transport
// sends the Responses API (a body and a stream) and embeddings through the
// engine, with the OpenAI SDK unchanged: the x-sluice headers are set, and
// a Responses stream is not given chat's stream_options (the Responses API
// would refuse it).
func TestTransportSchedulesResponsesAndEmbeddings(t *testing.T) {
	t.Parallel()
	up := &responsesUpstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	tr, err := sluice.NewTransport(sluice.Upstream{Name: "openai", Protocol: sluice.OpenAI, BaseURL: srv.URL, APIKey: "sk-up",
		Limits: sluice.Limits{RequestsPerMinute: 600, TokensPerMinute: 100_000}})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, tr.Start(ctx))
	t.Cleanup(func() { require.NoError(t, tr.Stop(context.Background())) })
	c := openai.NewClient(option.WithHTTPClient(&http.Client{Transport: tr}), option.WithAPIKey("app"), option.WithMaxRetries(0))

	var raw *http.Response
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(32),
		ServiceTier: responses.ResponseNewParamsServiceTierFlex,
		Input:       responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, option.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "hello there", r.OutputText())
	require.Equal(t, int64(2), r.Usage.OutputTokens)
	require.Equal(t, "openai", raw.Header.Get("X-Sluice-Upstream"))
	require.Equal(t, "1", raw.Header.Get("X-Sluice-Attempts"))

	s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4.1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream")}})
	var text strings.Builder
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.output_text.delta" {
			text.WriteString(ev.AsResponseOutputTextDelta().Delta)
		}
	}
	require.NoError(t, s.Err())
	require.NoError(t, s.Close())
	require.Equal(t, "hello there", text.String())

	e, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: openai.EmbeddingModelTextEmbedding3Small,
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed")}}, option.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, []float64{0.5, 0.25}, e.Data[0].Embedding)
	require.Equal(t, "1", raw.Header.Get("X-Sluice-Attempts"))

	up.mu.Lock()
	defer up.mu.Unlock()
	require.Equal(t, []string{"/v1/responses", "/v1/responses", "/v1/embeddings"}, up.paths)
	require.NotContains(t, up.bodies[1], "stream_options", "a Responses stream is sent as the caller wrote it")
	require.Contains(t, up.bodies[0], `"service_tier":"flex"`, "service_tier passed through")

	// A path the engine does not schedule is answered, not sent.
	_, err = c.Models.List(ctx)
	require.Error(t, err)
	require.Len(t, up.paths, 3)
}
