package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestMaxConnectionsAnswers503: a connection beyond max_connections gets a
// complete 503 at once (not a hang), and a slot freed is usable again.
func TestMaxConnectionsAnswers503(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", MaxConnections: 1,
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, APIKey: "sk-up"}}},
		withEngine("claude", &fakeEngine{}), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	var d net.Dialer
	first, err := d.DialContext(t.Context(), "tcp", g.Addr())
	require.NoError(t, err)
	_, err = first.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(first), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode) // the first connection holds the only slot (keep-alive)

	second, err := d.DialContext(t.Context(), "tcp", g.Addr())
	require.NoError(t, err)
	defer second.Close()
	require.NoError(t, second.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp2, err := http.ReadResponse(bufio.NewReader(second), nil)
	require.NoError(t, err)
	defer resp2.Body.Close()
	resp = resp2
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Contains(t, string(body), "max_connections")
	requireAPIError(t, body, "overloaded_error")

	require.NoError(t, first.Close())
	// The slot is freed when the server has seen the close, which a loaded
	// machine may take a while to do: until then a probe may be refused or
	// cut, which is not yet a failure. Each probe dials afresh, so no
	// connection pooled by another test is reused.
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	require.Eventually(t, func() bool {
		req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+g.Addr()+"/healthz", nil)
		require.NoError(t, err)
		resp, err := probe.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == 200
	}, 20*time.Second, 10*time.Millisecond)
}

// TestRequestLimitsOnEveryRoute: oversized headers get 431, oversized
// bodies 413 on the pass-through, scheduled and jobs routes; the server
// carries the configured timeouts.
func TestRequestLimitsOnEveryRoute(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0", MaxBodyBytes: 1024, MaxHeaderBytes: 2048,
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, APIKey: "sk-up", BaseURL: "http://127.0.0.1:1"},
			{Name: "gpt", Protocol: llm.OpenAI, APIKey: "sk-up", BaseURL: "http://127.0.0.1:1"}},
		Jobs: jobs.Settings{}},
		withEngine("claude", &fakeEngine{}), withEngine("gpt", &fakeEngine{}), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	require.Equal(t, ReadHeaderTimeoutDefault, g.http.ReadHeaderTimeout)
	require.Equal(t, ReadTimeoutDefault, g.http.ReadTimeout)
	require.Equal(t, WriteTimeoutDefault, g.http.WriteTimeout)
	require.Equal(t, IdleTimeoutDefault, g.http.IdleTimeout)
	base := "http://" + g.Addr()

	// Headers over max_header_bytes get a JSON 431 in the route's error
	// shape (the Anthropic envelope off the upstream routes), with a
	// request id; far beyond it Go's server still answers 431 itself.
	for _, tc := range []struct {
		path string
		size int
		p    llm.Protocol
	}{
		{"/v1/status", 2048, llm.Anthropic},
		{"/v1/jobs", 4 << 10, llm.Anthropic},
		{"/claude/v1/messages", 6 << 10, llm.Anthropic},
		{"/gpt/v1/chat/completions", 3 << 10, llm.OpenAI},
	} {
		req, err := http.NewRequestWithContext(t.Context(), "POST", base+tc.path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("X-Big", strings.Repeat("a", tc.size))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode, "%s: %s", tc.path, body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), tc.path)
		require.NotEmpty(t, resp.Header.Get(frontdoor.HeaderRequestID), tc.path)
		msg := requireProviderError(t, tc.p, body, "invalid_request_error")
		require.Contains(t, msg, "max_header_bytes", tc.path)
	}
	req, err := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/status", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	// Under the limit is served.
	req, err = http.NewRequestWithContext(t.Context(), "GET", base+"/healthz", nil)
	require.NoError(t, err)
	req.Header.Set("X-Big", strings.Repeat("a", 1500))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	big := `{"pad":"` + strings.Repeat("a", 2048) + `"}`
	for _, path := range []string{"/claude/v1/models", "/claude/v1/messages"} {
		code, body := call(t, "POST", base+path, "", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%s: %s", path, body)
		requireProviderError(t, llm.Anthropic, body, "request_too_large")
	}
}
