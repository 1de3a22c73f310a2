package sluice_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// recordingObserver is a user's Observer of some events.
type recordingObserver struct {
	sluice.NopObserver
	mu     sync.Mutex
	events []string
}

func (r *recordingObserver) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordingObserver) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recordingObserver) Enqueued(p sluice.Priority) { r.add("enqueued " + p.String()) }

func (r *recordingObserver) Attempted(outcome string, status int, _ time.Duration) {
	r.add(fmt.Sprintf("attempted %s %d", outcome, status))
}

func (r *recordingObserver) Reconciled(est, actual sluice.Tokens) {
	r.add(fmt.Sprintf("reconciled %d/%d -> %d/%d", est.Input, est.Output, actual.Input, actual.Output))
}

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
	clk, rt, obs := &countingClock{}, &countingRoundTripper{}, &recordingObserver{}
	tr, err := sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic, BaseURL: up.URL},
		sluice.WithClock(clk), sluice.WithHTTPClient(&http.Client{Transport: rt}), sluice.WithObserver(obs))
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, tr.Stop(context.Background())) })

	req, err := http.NewRequestWithContext(sluice.WithPriority(context.Background(), sluice.Low), "POST", "http://x/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body) // the usage is read from the body
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)
	require.EqualValues(t, 1, rt.calls.Load(), "WithHTTPClient")
	require.Positive(t, clk.reads.Load(), "WithClock")
	require.Eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.events) == 3
	}, 5*time.Second, time.Millisecond, "WithObserver")
	events := obs.snapshot()
	require.Equal(t, "enqueued low", events[0])
	require.Equal(t, "attempted success 200", events[1])
	require.Regexp(t, `^reconciled \d+/4 -> 1/1$`, events[2])

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
