package frontdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

const okMessage = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":10,"output_tokens":5}}`

// capture is an upstream that records every request and answers with
// status and body.
type capture struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
}

func newCapture(t *testing.T, status int, ct, body string) *capture {
	t.Helper()
	c := &capture{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.reqs = append(c.reqs, r.Clone(context.Background()))
		c.bodies = append(c.bodies, string(b))
		c.mu.Unlock()
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(c.Close)
	return c
}

// got returns the requests received so far and their bodies.
func (c *capture) got() ([]*http.Request, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*http.Request(nil), c.reqs...), append([]string(nil), c.bodies...)
}

func startDispatcher(t *testing.T, p llm.Protocol, url string, mod func(*dispatch.Config)) *dispatch.Dispatcher {
	t.Helper()
	cfg := dispatch.Config{Config: upstream.Config{Name: "up", Protocol: p, BaseURL: url, APIKey: "sk-upstream", JitterAllowance: -1},
		Clock: clock.NewFake(t0), Rand: rand.New(rand.NewPCG(1, 2))}
	if mod != nil {
		mod(&cfg)
	}
	d, err := dispatch.New(cfg)
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	return d
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func roundTrip(t *testing.T, tr http.RoundTripper, ctx context.Context, url, body string, header map[string]string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", "app-key")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestTransportSendsThroughDispatcher(t *testing.T) {
	t.Parallel()
	up := newCapture(t, 200, "application/json", okMessage)
	d := startDispatcher(t, llm.Anthropic, up.URL, nil)
	tr := frontdoor.NewTransport(d)
	ctx := frontdoor.WithClient(frontdoor.WithPriority(context.Background(), llm.Critical), "app")
	rep := roundTrip(t, tr, ctx, "https://api.anthropic.com/v1/messages?beta=true", messageBody,
		map[string]string{"X-Priority": "low", "Api-Key": "app-key", "X-Sluice-Client": "other", "Anthropic-Beta": "b1"})
	require.Equal(t, 200, rep.status)
	require.JSONEq(t, okMessage, string(rep.body))
	require.Equal(t, "1", rep.header.Get("X-Sluice-Attempts"))
	require.Equal(t, "0", rep.header.Get("X-Sluice-Queue-Ms"))

	reqs, _ := up.got()
	require.Len(t, reqs, 1)
	got := reqs[0]
	require.Equal(t, "/v1/messages", got.URL.Path)
	require.Equal(t, "beta=true", got.URL.RawQuery)
	require.Equal(t, "sk-upstream", got.Header.Get("X-Api-Key"))
	require.Equal(t, "b1", got.Header.Get("Anthropic-Beta"))
	require.Equal(t, "2023-06-01", got.Header.Get("Anthropic-Version"))
	// The Transport used to forward Api-Key and X-Sluice-* it did not know.
	for _, k := range []string{"Api-Key", "X-Priority", "X-Sluice-Client"} {
		require.Empty(t, got.Header.Values(k), k)
	}
}

func TestTransportHonoursTheDeadlineHeader(t *testing.T) {
	t.Parallel()
	up := newCapture(t, 200, "application/json", okMessage)
	// One request a minute: the second waits about a minute, past its 5 s
	// deadline, so it is shed at once with 429 instead of waiting.
	d := startDispatcher(t, llm.Anthropic, up.URL, func(c *dispatch.Config) { c.Limits = upstream.Limits{RequestsPerMinute: 1} })
	tr := frontdoor.NewTransport(d)
	first := roundTrip(t, tr, context.Background(), "https://x/v1/messages", messageBody, nil)
	require.Equal(t, 200, first.status)
	rep := roundTrip(t, tr, context.Background(), "https://x/v1/messages", messageBody, map[string]string{"X-Sluice-Deadline": "5s"})
	require.Equal(t, 429, rep.status, string(rep.body))
	require.Equal(t, "false", rep.header.Get("X-Should-Retry"))
	require.NotEmpty(t, rep.header.Get("Request-Id"))
	reqs, _ := up.got()
	require.Len(t, reqs, 1)
}

func TestTransportSynthesisesProviderErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		body       string
		header     map[string]string
		limits     upstream.Limits
		status     int
		errType    string
		retryAfter string
	}{
		{name: "invalid body", body: `{"model":"m","messages":[]}`, status: 400, errType: "invalid_request_error"},
		{name: "bad priority", body: messageBody, header: map[string]string{"X-Priority": "urgent"}, status: 400, errType: "invalid_request_error"},
		{name: "bad deadline", body: messageBody, header: map[string]string{"X-Sluice-Deadline": "soon"}, status: 400, errType: "invalid_request_error"},
		{name: "too large", body: messageBody, limits: upstream.Limits{OutputTokensPerMinute: 50}, status: 413, errType: "request_too_large"},
		{name: "shed", body: messageBody, limits: upstream.Limits{RequestsPerMinute: 1}, status: 429, errType: "rate_limit_error", retryAfter: "8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newCapture(t, 200, "application/json", okMessage)
			d := startDispatcher(t, llm.Anthropic, up.URL, func(c *dispatch.Config) {
				c.Limits = tc.limits
				c.Classes.Normal.MaxWait = 10 * time.Second
			})
			tr := frontdoor.NewTransport(d)
			if tc.name == "shed" { // use the one request a minute first
				first := roundTrip(t, tr, context.Background(), "https://x/v1/messages", messageBody, nil)
				require.Equal(t, 200, first.status)
			}
			rep := roundTrip(t, tr, context.Background(), "https://x/v1/messages", tc.body, tc.header)
			require.Equal(t, tc.status, rep.status)
			require.Equal(t, "false", rep.header.Get("X-Should-Retry"))
			require.Equal(t, tc.retryAfter, rep.header.Get("Retry-After"))
			var env struct {
				Type  string `json:"type"`
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
				RequestID string `json:"request_id"`
			}
			require.NoError(t, json.Unmarshal(rep.body, &env))
			require.Equal(t, "error", env.Type)
			require.Equal(t, tc.errType, env.Error.Type)
			require.NotEmpty(t, env.RequestID, "the Transport's errors carry a request id, as the gateway's do")
			require.Equal(t, env.RequestID, rep.header.Get("Request-Id"))
		})
	}
}

// TestTransportReconcilesOpenAIStreams: a caller streaming a chat
// completion without asking for usage still gets its reservation
// reconciled: the Transport asks the upstream for the usage chunk, reads
// it, and strips it from what the caller sees.
func TestTransportReconcilesOpenAIStreams(t *testing.T) {
	t.Parallel()
	const (
		content = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":null}\n\n"
		usage   = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n"
		done    = "data: [DONE]\n\n"
	)
	up := newCapture(t, 200, "text/event-stream", content+usage+done)
	d := startDispatcher(t, llm.OpenAI, up.URL, func(c *dispatch.Config) { c.Limits = upstream.Limits{TokensPerMinute: 60_000} })
	full := d.Snapshot().Buckets[flow.Tokens].Level

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://api.openai.com/v1/chat/completions", bytes.NewReader([]byte(chatStream)))
	require.NoError(t, err)
	resp, err := frontdoor.NewTransport(d).RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	_, bodies := up.got()
	require.Contains(t, bodies[0], `"include_usage":true`, "the upstream was asked for usage")
	require.Equal(t, content+done, string(got), "the caller sees no usage chunk it did not ask for")
	require.Equal(t, int64(-1), resp.ContentLength)
	require.InDelta(t, full-12, d.Snapshot().Buckets[flow.Tokens].Level, 0.5, "charged the actual 12 tokens, not the 1,000-token reservation")
}

// TestTransportCountsTokensOnItsOwnBucket: through the in-process
// Transport a token-counting request (Anthropic count_tokens, OpenAI
// responses/input_tokens) is sent as it is with the upstream's key,
// answered with the provider's count, and takes nothing from the model
// route's quota (a bad counting body is the provider-shaped 400).
func TestTransportCountsTokensOnItsOwnBucket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		proto                   llm.Protocol
		url, path, body, answer string
		bad                     string
		keyHeader, key          string
	}{
		{llm.Anthropic, "https://api.anthropic.com", "/v1/messages/count_tokens",
			`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"count me"}]}`, `{"input_tokens":12}`,
			`{"model":1}`, "x-api-key", "sk-upstream"},
		{llm.OpenAI, "https://api.openai.com", "/v1/responses/input_tokens",
			`{"model":"gpt-4.1","input":"count me"}`, `{"object":"response.input_tokens","input_tokens":12}`,
			`{"input":5}`, "Authorization", "Bearer sk-upstream"},
	}
	for _, tt := range tests {
		t.Run(string(tt.proto), func(t *testing.T) {
			t.Parallel()
			up := newCapture(t, http.StatusOK, "application/json", tt.answer)
			d := startDispatcher(t, tt.proto, up.URL, func(c *dispatch.Config) { c.Limits.RequestsPerMinute = 60 })
			client := &http.Client{Transport: frontdoor.NewTransport(d)}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, tt.url+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set(tt.keyHeader, "sk-client")
			resp, err := client.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.JSONEq(t, tt.answer, string(b))
			require.Equal(t, "1", resp.Header.Get(frontdoor.HeaderAttempts))
			reqs, bodies := up.got()
			require.Len(t, reqs, 1)
			require.Equal(t, tt.path, reqs[0].URL.Path)
			require.Equal(t, tt.key, reqs[0].Header.Get(tt.keyHeader))
			require.JSONEq(t, tt.body, bodies[0])
			b0 := d.Snapshot().Buckets[flow.Requests]
			require.InDelta(t, b0.Depth, b0.Level, 0.01, "the model route's request bucket is untouched")

			bad, err := http.NewRequestWithContext(t.Context(), http.MethodPost, tt.url+tt.path, strings.NewReader(tt.bad))
			require.NoError(t, err)
			resp, err = client.Do(bad)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			reqs, _ = up.got()
			require.Len(t, reqs, 1, "a bad body never reaches the provider")
		})
	}
}
