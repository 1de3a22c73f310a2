package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
)

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// ctxBody is a response body whose Read blocks until ctx ends, after
// serving prefix.
type ctxBody struct {
	ctx    context.Context
	prefix *strings.Reader
}

func (b *ctxBody) Read(p []byte) (int, error) {
	if b.prefix.Len() > 0 {
		return b.prefix.Read(p)
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func (b *ctxBody) Close() error { return nil }

// TestCancelAfterSendKeepsTheRequestToken: a caller that cancels once its
// request was sent gets back the tokens of the answer it never read (or
// of the part its stream did not report), but the request itself reached
// the provider and stays counted against RPM. (The old code refunded the
// whole reservation, request slot included.)
func TestCancelAfterSendKeepsTheRequestToken(t *testing.T) {
	t.Parallel()
	streamStart := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"
	tests := []struct {
		name string
		// answer is the provider's behaviour once the request arrived;
		// sent is closed then.
		answer func(r *http.Request) (*http.Response, error)
		// inputKept is how many input tokens stay debited.
		inputKept float64
	}{
		{"no answer yet", func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}, 0},
		{"error body cut off", func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 529, Header: http.Header{"Content-Type": {"application/json"}},
				Body: &ctxBody{ctx: r.Context(), prefix: strings.NewReader(`{"type":"error",`)}, Request: r}, nil
		}, 0},
		{"stream before content", func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: &ctxBody{ctx: r.Context(), prefix: strings.NewReader(streamStart)}, Request: r}, nil
		}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sent := make(chan struct{})
			rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				_, _ = io.Copy(io.Discard, r.Body)
				close(sent)
				return tt.answer(r)
			})
			d, _, _ := start(t, newUpstream(t, ok()), func(c *dispatch.Config) {
				c.Limits.RequestsPerMinute = 600
				c.Limits.InputTokensPerMinute = 60000
				c.HTTPClient = &http.Client{Transport: rt}
			})
			before := d.Snapshot().Buckets
			ctx, cancel := context.WithCancel(context.Background())
			res := doAsync(ctx, d, request())
			<-sent
			cancel()
			r := <-res
			require.True(t, errors.Is(r.err, context.Canceled), "got %v", r.err)
			after := d.Snapshot()
			require.Zero(t, after.InFlight)
			require.InDelta(t, before[flow.Requests].Level-1, after.Buckets[flow.Requests].Level, 1e-9,
				"the request reached the provider: its request token stays spent")
			require.InDelta(t, before[flow.InputTokens].Level-tt.inputKept, after.Buckets[flow.InputTokens].Level, 1e-9)
		})
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestSteadyLoadReusesConnections: with the library's default client, a
// steady load of N calls in flight at a time (N = max_concurrency) reuses
// N connections round after round. (http.Transport keeps 2 idle
// connections per host by default: the old client dialed N−2 new ones in
// every round.)
func TestSteadyLoadReusesConnections(t *testing.T) {
	t.Parallel()
	const n, rounds = 12, 4
	var mu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		// A barrier: every round's n calls are in flight together.
		mu.Lock()
		arrived++
		if arrived%n == 0 {
			close(release)
			release = make(chan struct{})
			mu.Unlock()
		} else {
			ch := release
			mu.Unlock()
			<-ch
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okMessage)
	}))
	ln := &countingListener{Listener: srv.Listener}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	d, _, _ := start(t, &upstream{Server: srv}, func(c *dispatch.Config) {
		c.Limits.MaxConcurrency = n
		// Limits configured: with none the first call would go alone
		// until its answer (FirstAnswerWait), and the barrier wants n.
		c.Limits.RequestsPerMinute, c.Limits.InputTokensPerMinute, c.Limits.OutputTokensPerMinute = 1e6, 1e9, 1e9
		c.HTTPClient = nil // the library's default client
	})
	for range rounds {
		res := make([]<-chan result, n)
		for i := range res {
			res[i] = doAsync(context.Background(), d, request())
		}
		for _, ch := range res {
			require.NoError(t, (<-ch).err)
		}
	}
	require.EqualValues(t, n, ln.accepted.Load(), "connections dialed for %d rounds of %d calls", rounds, n)
}
