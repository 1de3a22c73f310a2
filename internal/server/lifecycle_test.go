package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/opsview"
	upcfg "github.com/sluicehq/sluice/upstream"
)

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	eng := &fakeEngine{do: func(context.Context, *dispatch.Request) (*dispatch.Response, error) {
		close(entered)
		<-release
		return okResponse(`{"done":true}`), nil
	}}
	srv, err := New(Config{Store: testStore(t),
		Listen:    "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}},
	}, withEngine("a", eng), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Stop(t.Context()) /* safe before Start */)
	srv, err = New(srv.Config(), withEngine("a", eng), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	require.ErrorIs(t, srv.Start(t.Context()), lifecycle.ErrStarted)
	base := "http://" + srv.Addr()

	type result struct {
		code int
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := http.Post(base+"/a/v1/messages", "application/json", strings.NewReader(anthropicBody))
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		inflight <- result{code: resp.StatusCode, body: string(b), err: err}
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(context.Background()) }()
	// New connections are refused once shutdown has begun.
	require.Eventually(t, func() bool {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	}, 5*time.Second, 5*time.Millisecond)
	close(release)
	r := <-inflight
	require.NoError(t, r.err)
	require.Equal(t, 200, r.code)
	require.Equal(t, `{"done":true}`, r.body)
	require.NoError(t, <-stopped)
	require.NoError(t, srv.Stop(t.Context()), "Stop is idempotent")
	require.ErrorIs(t, srv.Start(t.Context()), lifecycle.ErrStopped)
}

func TestShutdownGraceCutsOffStragglers(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	eng := &fakeEngine{do: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		close(entered)
		<-ctx.Done() // only the shutdown can end this request
		return nil, context.Cause(ctx)
	}}
	srv, err := New(Config{Store: testStore(t),
		Listen:        "127.0.0.1:0",
		ShutdownGrace: time.Millisecond,
		Upstreams:     []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}},
	}, withEngine("a", eng), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post("http://"+srv.Addr()+"/a/v1/messages", "application/json", strings.NewReader(anthropicBody))
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	require.NoError(t, srv.Stop(t.Context()))
	<-done
}

func TestNewRefusesPublicListenWithoutClients(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Listen: "0.0.0.0:0", Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}}})
	require.ErrorContains(t, err, "allow_public")
	srv, err := New(Config{Store: testStore(t), Listen: "0.0.0.0:0", AllowPublic: true, Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, APIKey: "k"}}})
	require.NoError(t, err)
	require.NoError(t, srv.Stop(t.Context()))
}

// TestEndToEndThroughDispatcher runs the real dispatcher against an
// httptest upstream: the key swap, the relay and the Sluice headers.
func TestEndToEndThroughDispatcher(t *testing.T) {
	t.Parallel()
	var sawKey, sawClientKey string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawKey = r.Header.Get("X-Api-Key")
		sawClientKey = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":5,"output_tokens":1}}`))
	}))
	defer up.Close()
	srv, err := New(Config{Store: testStore(t),
		Listen:    "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: up.URL, APIKey: upstreamKey}},
		Clients:   []clients.Config{{Name: "web", Key: "ck", Role: clients.RoleAdmin}}, // admin: reads /metrics
	}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	defer func() { require.NoError(t, srv.Stop(context.Background())) }()

	req, err := http.NewRequestWithContext(t.Context(), "POST", "http://"+srv.Addr()+"/claude/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer ck")
	req.Header.Set("X-Priority", "high")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, "body: %s", body)
	require.Contains(t, string(body), `"text":"hello"`)
	require.Equal(t, upstreamKey, sawKey)
	require.Empty(t, sawClientKey)
	require.Equal(t, "1", resp.Header.Get(frontdoor.HeaderAttempts))
	require.NotEmpty(t, resp.Header.Get(frontdoor.HeaderQueueMS))

	st, err := http.Get("http://" + srv.Addr() + "/v1/status")
	require.NoError(t, err)
	defer st.Body.Close()
	require.Equal(t, 401, st.StatusCode)
	sreq, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+srv.Addr()+"/v1/status", nil)
	require.NoError(t, err)
	sreq.Header.Set("x-api-key", "ck")
	st2, err := http.DefaultClient.Do(sreq)
	require.NoError(t, err)
	defer st2.Body.Close()
	var status opsview.StatusResponse
	require.NoError(t, json.NewDecoder(st2.Body).Decode(&status))
	require.Len(t, status.Upstreams, 1)
	require.Equal(t, "closed", status.Upstreams[0].Breaker)
	require.Positive(t, status.Upstreams[0].ConcurrencyLimit)

	mreq, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+srv.Addr()+"/metrics", nil)
	require.NoError(t, err)
	mreq.Header.Set("x-api-key", "ck")
	m, err := http.DefaultClient.Do(mreq)
	require.NoError(t, err)
	defer m.Body.Close()
	mb, err := io.ReadAll(m.Body)
	require.NoError(t, err)
	for _, name := range []string{"sluice_requests_total", "sluice_upstream_attempts_total", "sluice_queue_wait_seconds", "sluice_upstream_latency_seconds", "sluice_queue_length", "sluice_in_flight_requests", "sluice_concurrency_limit", "sluice_breaker_state"} {
		require.Contains(t, string(mb), name)
	}
}
