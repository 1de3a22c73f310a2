package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/membudget"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// chunked hides a reader's length so that the request is sent chunked.
type chunked struct{ io.Reader }

func TestChunkedBodyReservesAsItIsRead(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := membudget.NewBytes(SmallRequestBytes+chunkedStep, time.Second, clk, nil)
	body := bytes.Repeat([]byte("x"), SmallRequestBytes+chunkedStep+1)
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "/", chunked{bytes.NewReader(body)})
	require.NoError(t, err)
	r.ContentLength = -1
	res, err := reserveBody(b, r)
	require.NoError(t, err)
	require.Zero(t, b.InUse())

	// The body fits the limit but for its last byte: once the rest of the
	// limit is taken, that byte waits and is refused.
	got := make(chan error, 1)
	go func() {
		_, err := readRequestBody(nil, r, res.body(r), 1<<30)
		got <- err
	}()
	require.True(t, clk.WaitForTimers(1, 5*time.Second))
	require.EqualValues(t, SmallRequestBytes+chunkedStep, b.InUse())
	clk.Advance(time.Second)
	err = <-got
	var be bodyBytesError
	require.ErrorAs(t, err, &be)
	require.Equal(t, http.StatusServiceUnavailable, be.Problem().Status)
	res.release()
	require.Zero(t, b.InUse())
}

func TestReadRequestBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		body    string
		length  int64
		limit   int64
		wantErr string
	}{
		{name: "exact length", body: "hello", length: 5, limit: 10},
		{name: "chunked", body: "hello", length: -1, limit: 10},
		{name: "empty", body: "", length: 0, limit: 10},
		{name: "declared too large", body: "hello", length: 11, limit: 10, wantErr: "request body too large"},
		{name: "chunked too large", body: strings.Repeat("x", 11), length: -1, limit: 10, wantErr: "request body too large"},
		{name: "short body", body: "hel", length: 5, limit: 10, wantErr: "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := http.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
			require.NoError(t, err)
			r.ContentLength = tc.length
			got, err := readRequestBody(nil, r, r.Body, tc.limit)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.body, string(got))
			if tc.length >= 0 {
				require.Equal(t, len(tc.body), cap(got), "no growth")
			}
		})
	}
}

// TestLargeRequestsWaitThenGet503 runs the limit through the scheduled
// route: while one large request is in the engine, a second waits
// request_bytes_wait and gets a provider-shaped 503 with retry-after, a
// small one is served, and the bytes come back when the first is answered.
func TestLargeRequestsWaitThenGet503(t *testing.T) {
	t.Parallel()
	const large = 100 << 10
	ts := newTestServer(t, nil, func(c *Config) {
		c.MaxBodyBytes = 1 << 20
		c.MaxRequestBytesInFlight = 150 << 10
		c.RequestBytesWait = 2 * time.Second
	})
	entered, release := make(chan struct{}, 4), make(chan struct{})
	ts.a.do = func(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error) {
		if len(req.Body) >= large {
			entered <- struct{}{}
			<-release
		}
		return okResponse(`{"ok":true}`), nil
	}
	bigBody := `{"model":"claude-x","max_tokens":64,"messages":[{"role":"user","content":"` + strings.Repeat("x", large) + `"}]}`
	first := make(chan httpReply, 1)
	go func() {
		rep, _ := ts.do(t, http.MethodPost, "/a/v1/messages", bigBody, nil)
		first <- rep
	}()
	<-entered
	require.EqualValues(t, len(bigBody), ts.srv.bodyBytes.InUse())

	second := make(chan struct {
		rep  httpReply
		body []byte
	}, 1)
	go func() {
		rep, body := ts.do(t, http.MethodPost, "/a/v1/messages", bigBody, nil)
		second <- struct {
			rep  httpReply
			body []byte
		}{rep, body}
	}()
	require.True(t, ts.clock.WaitForTimers(1, 5*time.Second))

	small, _ := ts.do(t, http.MethodPost, "/a/v1/messages", anthropicBody, nil)
	require.Equal(t, http.StatusOK, small.StatusCode, "small requests are served while the limit is reached")

	ts.clock.Advance(2 * time.Second)
	got := <-second
	require.Equal(t, http.StatusServiceUnavailable, got.rep.StatusCode)
	require.Equal(t, "1", got.rep.Header.Get("Retry-After"))
	msg := requireProviderError(t, llm.Anthropic, got.body, "overloaded_error")
	require.Contains(t, msg, "max_request_bytes_in_flight")

	close(release)
	require.Equal(t, http.StatusOK, (<-first).StatusCode)
	require.Zero(t, ts.srv.bodyBytes.InUse())
	require.EqualValues(t, 1, refusedForMemory(t, ts.srv))
}

// refusedForMemory reads g's sluice_requests_refused_total{reason="memory"}.
func refusedForMemory(t *testing.T, g *Server) float64 {
	t.Helper()
	mfs, err := g.registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_requests_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "memory" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestJobSubmissionsUseTheBodyBytesLimit: POST /v1/jobs reserves its body until the
// job is stored, and is answered 503 with retry-after in the jobs API's
// envelope when the limit leaves no room, whether its length is declared or
// it comes chunked.
func TestJobSubmissionsUseTheBodyBytesLimit(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams:               []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: "http://127.0.0.1:1", APIKey: "sk-up"}},
		MaxRequestBytesInFlight: 128 << 10,
		RequestBytesWait:        time.Millisecond},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	body := `{"upstream":"claude","request":{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` +
		strings.Repeat("x", 100<<10) + `"}]}}`

	// Another request holds most of the limit.
	require.NoError(t, g.bodyBytes.Take(t.Context(), 100<<10, false))
	for _, length := range []int64{int64(len(body)), -1} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/jobs", chunked{strings.NewReader(body)})
		require.NoError(t, err)
		req.ContentLength = length
		if length >= 0 {
			req.Body = io.NopCloser(strings.NewReader(body))
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "length %d: %s", length, got)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Contains(t, string(got), "max_request_bytes_in_flight")
	}
	require.EqualValues(t, 100<<10, g.bodyBytes.InUse(), "refused requests give their bytes back")

	g.bodyBytes.Release(100 << 10)
	code, got := call(t, http.MethodPost, base+"/v1/jobs", "", body)
	require.Equal(t, http.StatusAccepted, code, string(got))
	require.Zero(t, g.bodyBytes.InUse(), "released once the job is stored")
	require.EqualValues(t, 2, refusedForMemory(t, g))
}
