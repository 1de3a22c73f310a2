package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	upcfg "github.com/sluicehq/sluice/upstream"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// The three front doors (the gateway's proxy route, the in-process
// Transport and the job worker) must send the provider the same request
// for the same input, and answer the same engine error the same way. These
// tests drive each door against one recording upstream and compare what
// went over the wire, byte for byte.

// wireCall is everything a front door decides about an upstream request.
type wireCall struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   string
}

// wire is a provider that records every request and answers with status
// (a stream for a streaming OpenAI request, JSON otherwise).
type wire struct {
	*httptest.Server
	calls chan wireCall
}

const (
	parityAnthropicOK = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":10,"output_tokens":5}}`
	parityOpenAIOK    = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	parityOpenAIChunk = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n" +
		"data: [DONE]\n\n"
	parityMessages = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	parityChat     = `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	parityStream   = `{"model":"gpt-4o-mini","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
)

func newWire(t *testing.T, p llm.Protocol, status int) *wire {
	t.Helper()
	wr := &wire{calls: make(chan wireCall, 16)}
	wr.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		// The request id differs per request by design; its presence is
		// what the doors must agree on.
		if h.Get(frontdoor.HeaderRequestID) != "" {
			h.Set(frontdoor.HeaderRequestID, "req_x")
		}
		wr.calls <- wireCall{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: h, Body: string(b)}
		switch {
		case status != http.StatusOK:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
		case p == llm.OpenAI && bytes.Contains(b, []byte(`"stream":true`)):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, parityOpenAIChunk)
		case p == llm.OpenAI:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, parityOpenAIOK)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, parityAnthropicOK)
		}
	}))
	t.Cleanup(wr.Close)
	return wr
}

// next returns the next request the provider received.
func (wr *wire) next(t *testing.T) wireCall {
	t.Helper()
	select {
	case c := <-wr.calls:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("the provider received nothing")
		return wireCall{}
	}
}

// parityEngine is the engine config every door is given, in the gateway's
// terms and the dispatcher's.
type parityEngine struct {
	limits upcfg.Limits
}

var (
	parityRetry   = upcfg.Retry{MaxAttempts: 1, BaseDelay: 500 * time.Millisecond, MaxDelay: 4 * time.Second}
	parityBreaker = upcfg.Breaker{ConsecutiveFailures: 100}
)

// startParityGateway runs `sluice serve` with one upstream "u" on wr, and the job
// queue when store is not StoreNone.
func startParityGateway(t *testing.T, p llm.Protocol, wr *wire, e parityEngine, store string, clk clock.Clock) string {
	t.Helper()
	g, err := New(Config{Store: store, Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "u", Protocol: p, BaseURL: wr.URL, APIKey: "sk-up", Limits: e.limits,
			Retry: parityRetry, Breaker: parityBreaker}}},
		WithClock(clk), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	return "http://" + g.Addr()
}

// startTransport runs the in-process Transport over the same engine config.
func startTransport(t *testing.T, p llm.Protocol, wr *wire, e parityEngine, clk clock.Clock) http.RoundTripper {
	t.Helper()
	// The same upcfg.Config values the gateway is given.
	d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "u", Protocol: p, BaseURL: wr.URL, APIKey: "sk-up",
		Limits: e.limits, Retry: parityRetry, Breaker: parityBreaker}, Clock: clk, Rand: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return frontdoor.NewTransport(d)
}

// answer is a response as a client reads it.
type answer struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, rt http.RoundTripper, url, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func parityPath(p llm.Protocol) string {
	if p == llm.OpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

func TestFrontDoorsSendIdenticalUpstreamRequests(t *testing.T) {
	t.Parallel()
	sdkHeaders := map[string]string{
		"Content-Type":            "application/json",
		"X-Api-Key":               "client-key",
		"Authorization":           "Bearer client-key",
		"Api-Key":                 "client-key", // forwarded by the old Transport
		"Proxy-Authorization":     "Basic Y2xpZW50",
		"X-Priority":              "high",
		"X-Sluice-Deadline":       "30s",
		"X-Sluice-Client":         "app",
		"X-Sluice-Trace":          "t-1", // any X-Sluice-* stays in Sluice
		"Connection":              "X-Hop",
		"X-Hop":                   "1",
		"User-Agent":              "Anthropic/Go 1.0",
		"X-Stainless-Timeout":     "600",
		"X-Stainless-Retry-Count": "0",
	}
	for _, tc := range []struct {
		name   string
		p      llm.Protocol
		query  string
		body   string
		header map[string]string
		// job is whether the case is also a job: a job has no client
		// headers and no query, only its body, priority and deadline.
		job bool
	}{
		{name: "anthropic bare", p: llm.Anthropic, body: parityMessages, header: map[string]string{"Content-Type": "application/json"}, job: true},
		{name: "openai bare", p: llm.OpenAI, body: parityChat, header: map[string]string{"Content-Type": "application/json"}, job: true},
		{name: "openai stream asks for usage", p: llm.OpenAI, body: parityStream, header: map[string]string{"Content-Type": "application/json"}, job: true},
		{name: "anthropic sdk headers", p: llm.Anthropic, query: "beta=true", body: parityMessages,
			header: merge(sdkHeaders, map[string]string{"Anthropic-Version": "2023-06-01", "Anthropic-Beta": "tools-2024-04-04"})},
		{name: "openai sdk headers", p: llm.OpenAI, body: parityStream,
			header: merge(sdkHeaders, map[string]string{"OpenAI-Organization": "org-1"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := parityPath(tc.p)
			if tc.query != "" {
				path += "?" + tc.query
			}
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))

			proxyWire := newWire(t, tc.p, http.StatusOK)
			base := startParityGateway(t, tc.p, proxyWire, parityEngine{}, StoreNone, clk)
			got := send(t, http.DefaultTransport, base+"/u"+path, tc.body, tc.header)
			require.Equal(t, http.StatusOK, got.status, got.body)
			viaProxy := proxyWire.next(t)

			transportWire := newWire(t, tc.p, http.StatusOK)
			rt := startTransport(t, tc.p, transportWire, parityEngine{}, clk)
			got = send(t, rt, "https://provider.example"+path, tc.body, tc.header)
			require.Equal(t, http.StatusOK, got.status, got.body)
			viaTransport := transportWire.next(t)

			require.Equal(t, viaProxy, viaTransport, "the proxy and the Transport send the same request")
			require.Equal(t, "sk-up", keyOf(tc.p, viaProxy.Header))
			require.Equal(t, "req_x", viaProxy.Header.Get(frontdoor.HeaderRequestID), "the request id is sent upstream")
			for _, k := range []string{"Api-Key", "Proxy-Authorization", "X-Priority", "X-Sluice-Deadline", "X-Sluice-Client", "X-Sluice-Trace", "X-Hop"} {
				require.Empty(t, viaProxy.Header.Values(k), k)
			}
			if tc.body == parityStream {
				require.Contains(t, viaProxy.Body, `"include_usage":true`)
			}
			if !tc.job {
				return
			}
			jobWire := newWire(t, tc.p, http.StatusOK)
			base = startParityGateway(t, tc.p, jobWire, parityEngine{}, testStore(t), clock.Real())
			code, body := call(t, "POST", base+"/v1/jobs", "", `{"upstream":"u","request":`+tc.body+`}`)
			require.Equal(t, http.StatusAccepted, code, string(body))
			require.Equal(t, viaProxy, jobWire.next(t), "the job worker sends the same request as the proxy")
			if tc.body != parityStream {
				return
			}
			// Like the proxy's client, the job keeps no usage chunk it did
			// not ask for, but its usage is still read from the stream.
			var job struct {
				ID       json.Number `json:"id"`
				State    string      `json:"state"`
				Response struct {
					Body  string    `json:"body"`
					Usage llm.Usage `json:"usage"`
				} `json:"response"`
			}
			require.NoError(t, json.Unmarshal(body, &job))
			code, body = call(t, "GET", base+"/v1/jobs/"+job.ID.String()+"?wait=20s", "", "")
			require.Equal(t, http.StatusOK, code, string(body))
			require.NoError(t, json.Unmarshal(body, &job))
			require.Equal(t, "succeeded", job.State, string(body))
			require.NotContains(t, job.Response.Body, `"choices":[]`)
			require.Contains(t, job.Response.Body, "[DONE]")
			require.Equal(t, int64(7), job.Response.Usage.OutputTokens)
		})
	}
}

func keyOf(p llm.Protocol, h http.Header) string {
	if p == llm.OpenAI {
		return strings.TrimPrefix(h.Get("Authorization"), "Bearer ")
	}
	return h.Get("X-Api-Key")
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestFrontDoorsRenderIdenticalErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		p        llm.Protocol
		upstream int // what the provider answers
		limits   upcfg.Limits
		body     string
		header   map[string]string
		status   int
	}{
		{name: "bad priority", p: llm.Anthropic, upstream: 200, body: parityMessages, header: map[string]string{"X-Priority": "urgent"}, status: 400},
		{name: "bad deadline openai", p: llm.OpenAI, upstream: 200, body: parityChat, header: map[string]string{"X-Sluice-Deadline": "soon"}, status: 400},
		{name: "invalid body", p: llm.Anthropic, upstream: 200, body: `{"model":"m","messages":[]}`, status: 400},
		{name: "too large for the quota", p: llm.Anthropic, upstream: 200, body: parityMessages, limits: upcfg.Limits{OutputTokensPerMinute: 50}, status: 413},
		{name: "anthropic overloaded, attempts exhausted", p: llm.Anthropic, upstream: 529, body: parityMessages, status: 529},
		{name: "openai unavailable, attempts exhausted", p: llm.OpenAI, upstream: 503, body: parityChat, status: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := parityEngine{limits: tc.limits}
			clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			header := merge(map[string]string{"Content-Type": "application/json"}, tc.header)

			base := startParityGateway(t, tc.p, newWire(t, tc.p, tc.upstream), e, StoreNone, clk)
			viaProxy := send(t, http.DefaultTransport, base+"/u"+parityPath(tc.p), tc.body, header)
			rt := startTransport(t, tc.p, newWire(t, tc.p, tc.upstream), e, clk)
			viaTransport := send(t, rt, "https://provider.example"+parityPath(tc.p), tc.body, header)

			require.Equal(t, tc.status, viaProxy.status, viaProxy.body)
			require.Equal(t, "false", viaProxy.header.Get("X-Should-Retry"))
			if tc.status >= 500 {
				require.NotEmpty(t, viaProxy.header.Get("Retry-After"), "a give-up carries a hint")
				require.Equal(t, "1", viaProxy.header.Get(frontdoor.HeaderAttempts))
			}
			viaProxy.header.Del("Date") // the HTTP server's own
			require.Equal(t, withoutRequestID(t, tc.p, viaProxy), withoutRequestID(t, tc.p, viaTransport))
		})
	}
}

// withoutRequestID replaces the answer's request id (random per answer, of
// fixed length, so Content-Length still holds) in its header and body with
// a fixed one.
func withoutRequestID(t *testing.T, p llm.Protocol, a answer) answer {
	t.Helper()
	key := frontdoor.RequestIDHeader(p)
	id := a.header.Get(key)
	require.True(t, strings.HasPrefix(id, "req_sluice_"), "answer has a request id: %q", id)
	require.Equal(t, id, a.header.Get(frontdoor.HeaderRequestID), "x-sluice-request-id is the same id")
	h := a.header.Clone()
	h.Set(key, "req_x")
	h.Set(frontdoor.HeaderRequestID, "req_x")
	body := strings.ReplaceAll(a.body, id, "req_x")
	require.True(t, json.Valid([]byte(body)), body)
	return answer{status: a.status, header: h, body: body}
}
