package sluice_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// countingClock is a user's Clock: the wall clock, counting its readings.
type countingClock struct{ reads atomic.Int64 }

func (c *countingClock) Now() time.Time { c.reads.Add(1); return time.Now() }

func (c *countingClock) NewTimer(d time.Duration) sluice.Timer { return wallTimer{time.NewTimer(d)} }

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time        { return w.t.C }
func (w wallTimer) Stop() bool                 { return w.t.Stop() }
func (w wallTimer) Reset(d time.Duration) bool { return w.t.Reset(d) }

// countingRoundTripper is a user's HTTP transport.
type countingRoundTripper struct{ calls atomic.Int64 }

func (c *countingRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestTransportOptions(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	clk, rt := &countingClock{}, &countingRoundTripper{}
	tr, err := sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic, BaseURL: up.URL},
		sluice.WithClock(clk), sluice.WithHTTPClient(&http.Client{Transport: rt}))
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, tr.Stop(context.Background())) })

	req, err := http.NewRequestWithContext(sluice.WithPriority(context.Background(), sluice.Low), "POST", "http://x/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, 1, rt.calls.Load(), "WithHTTPClient")
	require.Positive(t, clk.reads.Load(), "WithClock")

	_, err = sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic, Profile: "fast"})
	require.ErrorContains(t, err, `profile: unknown profile "fast"`)
}

func TestParsePriority(t *testing.T) {
	t.Parallel()
	for _, p := range []sluice.Priority{sluice.Critical, sluice.High, sluice.Normal, sluice.Low} {
		got, err := sluice.ParsePriority(p.String())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	_, err := sluice.ParsePriority("urgent")
	require.Error(t, err)
}
