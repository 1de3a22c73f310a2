package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
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
