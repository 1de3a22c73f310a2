package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestTraces runs a streamed request with a client traceparent and a job
// through the real engine on the mock, with an in-memory exporter: the
// request's span continues the client's trace, has children for the queue
// wait, the attempt and the stream, and the provider got the attempt's
// traceparent; a job's attempt has its own span with the call under it.
func TestTraces(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 4, Max: 4}, Seed: 2})
	require.NoError(t, err)
	var mu sync.Mutex
	var sent []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get("traceparent"))
		mu.Unlock()
		m.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: up.URL, APIKey: upstreamKey}}},
		WithLogger(discardLogger()), WithTracerProvider(tp))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/claude/v1/messages",
		strings.NewReader(`{"model":"claude-x","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
	require.NoError(t, err)
	req.Header.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	byName := func(name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(byName("POST /claude/*")) == 1 }, 5*time.Second, 5*time.Millisecond)
	root := byName("POST /claude/*")[0]
	require.Equal(t, clientTrace, root.SpanContext.TraceID().String(), "the client's trace is continued")
	require.Equal(t, "00f067aa0ba902b7", root.Parent.SpanID().String())
	require.Equal(t, trace.SpanKindServer, root.SpanKind)
	for _, name := range []string{"sluice.queue_wait", "sluice.attempt", "sluice.stream"} {
		spans := byName(name)
		require.Len(t, spans, 1, name)
		require.Equal(t, root.SpanContext.SpanID(), spans[0].Parent.SpanID(), "%s is a child of the request span", name)
	}
	attempt := byName("sluice.attempt")[0]
	mu.Lock()
	require.Equal(t, "00-"+clientTrace+"-"+attempt.SpanContext.SpanID().String()+"-01", sent[0], "the attempt's traceparent went upstream")
	mu.Unlock()
	attrs := map[string]any{}
	for _, a := range byName("sluice.stream")[0].Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	require.Equal(t, int64(4), attrs["gen_ai.usage.output_tokens"])

	// A pass-through request carries its span upstream too.
	preq, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/claude/v1/models", nil)
	require.NoError(t, err)
	preq.Header.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
	presp, err := http.DefaultClient.Do(preq)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, presp.Body)
	presp.Body.Close()
	require.Eventually(t, func() bool { return len(byName("GET /claude/*")) == 1 }, 5*time.Second, 5*time.Millisecond)
	mu.Lock()
	require.Equal(t, "00-"+clientTrace+"-"+byName("GET /claude/*")[0].SpanContext.SpanID().String()+"-01", sent[len(sent)-1])
	mu.Unlock()

	code, body := call(t, "POST", base+"/v1/jobs", "", `{"upstream":"claude","request":{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}`)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var job struct {
		ID json.Number `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &job))
	require.Eventually(t, func() bool { return len(byName("sluice.job_attempt")) == 1 }, 10*time.Second, 5*time.Millisecond)
	ja := byName("sluice.job_attempt")[0]
	var calls int
	for _, s := range byName("sluice.attempt") {
		if s.Parent.SpanID() == ja.SpanContext.SpanID() {
			calls++
		}
	}
	require.Equal(t, 1, calls, "the job's upstream call hangs under its attempt span")
	jattrs := map[string]any{}
	for _, a := range ja.Attributes {
		jattrs[string(a.Key)] = a.Value.AsInterface()
	}
	require.Equal(t, "job_"+job.ID.String(), jattrs["sluice.request_id"])
}

// TestTraceEndpointAttribute: a request's span names the endpoint it
// created (sluice.endpoint): chat on both protocols, responses,
// embeddings, count_tokens on both protocols, and other for a
// pass-through.
func TestTraceEndpointAttribute(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 4, Max: 4}, Seed: 2})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: upstreamKey},
			{Name: "o", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: upstreamKey}}},
		WithLogger(discardLogger()), WithTracerProvider(tp))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	tests := []struct {
		method, path, body, want string
		code                     int
	}{
		{"POST", "/a/v1/messages", `{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "chat", 200},
		{"POST", "/o/v1/chat/completions", `{"model":"gpt-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "chat", 200},
		{"POST", "/o/v1/responses", `{"model":"gpt-x","max_output_tokens":16,"input":"hi"}`, "responses", 200},
		{"POST", "/o/v1/embeddings", `{"model":"text-embedding-3-small","input":"hi"}`, "embeddings", 200},
		{"POST", "/a/v1/messages/count_tokens", `{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}`, "count_tokens", 200},
		{"POST", "/o/v1/responses/input_tokens", `{"model":"gpt-x","input":"hi"}`, "count_tokens", 200},
		{"GET", "/o/v1/models", "", "other", http.StatusNotFound}, // the mock has no models route
	}
	for i, tt := range tests {
		code, body := call(t, tt.method, base+tt.path, "", tt.body)
		require.Equal(t, tt.code, code, "%s %s: %s", tt.method, tt.path, body)
		var span tracetest.SpanStub
		require.Eventually(t, func() bool {
			var ours []tracetest.SpanStub
			for _, s := range exp.GetSpans() {
				if s.SpanKind == trace.SpanKindServer {
					ours = append(ours, s)
				}
			}
			if len(ours) != i+1 {
				return false
			}
			span = ours[i]
			return true
		}, 5*time.Second, 5*time.Millisecond)
		attrs := map[string]any{}
		for _, a := range span.Attributes {
			attrs[string(a.Key)] = a.Value.AsInterface()
		}
		require.Equal(t, tt.path, attrs["url.path"])
		require.Equal(t, tt.want, attrs["sluice.endpoint"], "%s %s", tt.method, tt.path)
	}
}
