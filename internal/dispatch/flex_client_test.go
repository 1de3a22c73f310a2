package dispatch_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/provider"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestFlexTransportTimeout: the flex tier's transport waits for response
// headers flex.timeout (15 minutes unless set, OpenAI's advice for flex),
// never less than request_timeout; the standard one request_timeout.
func TestFlexTransportTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		cfg           upcfg.Config
		standard, flx time.Duration
	}{
		{"defaults", upcfg.Config{}, upcfg.RequestTimeoutDefault, upcfg.FlexTimeoutDefault},
		{"set", upcfg.Config{RequestTimeout: time.Minute, Flex: upcfg.Flex{Timeout: 20 * time.Minute}}, time.Minute, 20 * time.Minute},
		{"never below request_timeout", upcfg.Config{RequestTimeout: 30 * time.Minute, Flex: upcfg.Flex{Timeout: time.Minute}}, 30 * time.Minute, 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.cfg.Name, tc.cfg.Protocol = "gpt", llm.OpenAI
			std, ok := dispatch.UpstreamTransport(http.DefaultTransport, tc.cfg).(*http.Transport)
			require.True(t, ok)
			flx, ok := dispatch.FlexTransport(http.DefaultTransport, tc.cfg).(*http.Transport)
			require.True(t, ok)
			require.Equal(t, tc.standard, std.ResponseHeaderTimeout)
			require.Equal(t, tc.flx, flx.ResponseHeaderTimeout)
		})
	}
	require.Equal(t, 15*time.Minute, upcfg.FlexTimeoutDefault)
}

// TestFlexRequestsUseTheFlexClient: a request in the flex tier is sent
// with the engine's flex client (its longer timeout), every other request
// with its standard one.
func TestFlexRequestsUseTheFlexClient(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(t0)
	m, err := mock.New(mock.Config{Clock: fc})
	require.NoError(t, err)
	var std, flx atomic.Int64
	counting := func(n *atomic.Int64) *http.Client {
		rt := inProcess(m.Handler())
		return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(r)
		})}
	}
	d, err := dispatch.New(dispatch.Config{Config: upcfg.Config{Name: "gpt", Protocol: llm.OpenAI, BaseURL: "http://mock.invalid", APIKey: "sk"},
		Clock: fc, HTTPClient: counting(&std), FlexHTTPClient: counting(&flx)})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	send := func(tier string) {
		t.Helper()
		body := `{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		if tier != "" {
			body = `{"service_tier":"` + tier + `","model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		}
		res := <-doAsync(context.Background(), d, &dispatch.Request{Method: http.MethodPost, Path: "/v1/chat/completions", Body: []byte(body),
			Cost: provider.Cost{Model: "gpt-4o-mini", InputTokens: 10, OutputTokens: 8, ServiceTier: tier}, Priority: llm.Low,
			Deadline: t0.Add(time.Hour)})
		require.NoError(t, res.err)
		require.Equal(t, http.StatusOK, res.resp.StatusCode, res.body)
	}
	send("flex")
	require.Equal(t, [2]int64{0, 1}, [2]int64{std.Load(), flx.Load()})
	send("")
	send("default")
	require.Equal(t, [2]int64{2, 1}, [2]int64{std.Load(), flx.Load()})
}
