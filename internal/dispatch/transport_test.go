package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/internal/upstream"
)

const messageBody = `{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`

// transportReply is what a test reads from a round trip, taken before the
// response body is closed.
type transportReply struct {
	status int
	header http.Header
	body   []byte
}

// roundTrip sends body through tr, reads and closes the response body, and
// returns the status, headers and body.
func roundTrip(t *testing.T, tr http.RoundTripper, ctx context.Context, body string, header map[string]string) transportReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.anthropic.com/v1/messages?beta=true", bytes.NewReader([]byte(body)))
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
	return transportReply{status: resp.StatusCode, header: resp.Header, body: b}
}

func TestTransportSendsThroughDispatcher(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, rec := start(t, u, nil)
	tr := dispatch.NewTransport(d)
	rep := roundTrip(t, tr, dispatch.WithClient(dispatch.WithPriority(context.Background(), llm.Critical), "app"), messageBody, map[string]string{"X-Priority": "low"})
	require.Equal(t, 200, rep.status)
	require.JSONEq(t, okMessage, string(rep.body))
	require.Equal(t, "sk-upstream", u.headers[0].Get("X-Api-Key"))
	require.Empty(t, u.headers[0].Get("X-Priority"), "steering headers stay in Sluice")
	require.Equal(t, 1, rec.admitted)
}

func TestTransportSynthesisesProviderErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		limits     upcfg.Limits
		status     int
		errType    string
		retryAfter string
	}{
		{name: "invalid body", body: `{"model":"m","messages":[]}`, status: 400, errType: "invalid_request_error"},
		{name: "bad priority", body: messageBody, header: map[string]string{"X-Priority": "urgent"}, status: 400, errType: "invalid_request_error"},
		{name: "too large", body: messageBody, limits: upcfg.Limits{OutputTokensPerMinute: 50}, status: 413, errType: "request_too_large"},
		{name: "shed", body: messageBody, limits: upcfg.Limits{RequestsPerMinute: 1}, status: 429, errType: "rate_limit_error", retryAfter: "8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, ok())
			d, _, _ := start(t, u, func(c *dispatch.Config) {
				c.Limits = tt.limits
				c.Classes.Normal.MaxWait = 10 * time.Second
			})
			tr := dispatch.NewTransport(d)
			if tt.name == "shed" { // use the one request a minute first
				first := roundTrip(t, tr, context.Background(), messageBody, nil)
				require.Equal(t, 200, first.status)
			}
			rep := roundTrip(t, tr, context.Background(), tt.body, tt.header)
			require.Equal(t, tt.status, rep.status)
			require.Equal(t, "false", rep.header.Get("X-Should-Retry"))
			require.Equal(t, tt.retryAfter, rep.header.Get("Retry-After"))
			var env struct {
				Type  string `json:"type"`
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(rep.body, &env))
			require.Equal(t, "error", env.Type)
			require.Equal(t, tt.errType, env.Error.Type)
		})
	}
}

// BenchmarkDispatcherOverhead compares a request admitted at once through
// Do with a direct call to the same upstream.
func BenchmarkDispatcherOverhead(b *testing.B) {
	u := newUpstream(&testing.T{}, ok())
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

// TestTransportReconcilesOpenAIStreams: a caller streaming a chat
// completion without asking for usage still gets its reservation
// reconciled: the Transport asks the upstream for the usage chunk, reads it,
// and strips it from what the caller sees.
func TestTransportReconcilesOpenAIStreams(t *testing.T) {
	t.Parallel()
	const (
		content = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}],\"usage\":null}\n\n"
		usage   = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n"
		done    = "data: [DONE]\n\n"
	)
	var sawIncludeUsage atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		sawIncludeUsage.Store(bytes.Contains(b, []byte(`"include_usage":true`)))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, content+usage+done)
	}))
	t.Cleanup(up.Close)
	fc := clock.NewFake(t0)
	d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "gpt", Protocol: llm.OpenAI, BaseURL: up.URL, APIKey: "sk",
		Limits: upcfg.Limits{TokensPerMinute: 60_000}}, Clock: fc, Rand: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	full := d.Snapshot().Buckets[flow.Tokens].Level

	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://api.openai.com/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := dispatch.NewTransport(d).RoundTrip(req)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	require.True(t, sawIncludeUsage.Load(), "the upstream was asked for usage")
	require.Equal(t, content+done, string(got), "the caller sees no usage chunk it did not ask for")
	require.InDelta(t, full-12, d.Snapshot().Buckets[flow.Tokens].Level, 0.5, "charged the actual 12 tokens, not the 1,000-token reservation")
}
