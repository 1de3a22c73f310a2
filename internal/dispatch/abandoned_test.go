package dispatch_test

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

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
)

// stalledStream is an upstream that starts a stream (message_start and
// one delta) and then sends nothing more until release is closed or the
// call ends; calls counts its calls' ends.
func stalledStream(t *testing.T) (url string, release chan struct{}, ended chan struct{}) {
	t.Helper()
	release, ended = make(chan struct{}), make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		defer func() { ended <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			_, _ = io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, release, ended
}

// TestAbandonedStreamIsReadOnToItsUsage: a stream its reader closes
// before its end is read on, past the reader's own context, and settled
// with the usage the provider reports at its end; one that does not end
// within abandoned_stream_drain is cut and keeps its whole reservation
// (no usage: its worst case); with a negative drain it is cut at once.
func TestAbandonedStreamIsReadOnToItsUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		drain   time.Duration
		release bool // the provider finishes the stream
		usage   bool
	}{
		{"read on to its usage", time.Minute, true, true},
		{"cut at the drain's bound", 2 * time.Second, false, false},
		{"cut at once", -1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, release, ended := stalledStream(t)
			d, fc, _ := start(t, &upstream{Server: &httptest.Server{URL: url}}, func(c *dispatch.Config) {
				c.AbandonedStreamDrain = tc.drain
				c.Limits.OutputTokensPerMinute = 60_000
			})
			ctx, cancel := context.WithCancel(context.Background())
			req := request()
			req.Body = []byte(`{"model":"claude-sonnet-4-5","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			req.Cost.OutputTokens = 4000 // most of the 4,900-token bucket (60,000 a minute less the margin, 5 s)
			resp, err := d.Do(ctx, req)
			require.NoError(t, err)
			buf := make([]byte, 64)
			_, err = resp.Body.Read(buf)
			require.NoError(t, err)
			before := d.Snapshot().Buckets[flow.OutputTokens].Level
			cancel() // the reader leaves...
			require.NoError(t, resp.Body.Close())
			if tc.release {
				close(release) // ...and the provider finishes anyway
			} else if tc.drain > 0 {
				require.True(t, fc.WaitForTimers(1, 5*time.Second))
				fc.Advance(tc.drain)
			}
			<-resp.Ended()
			<-ended
			end, ok := resp.End()
			require.True(t, ok)
			require.True(t, end.Abandoned)
			require.Equal(t, tc.usage, end.HasUsage)
			after := d.Snapshot().Buckets[flow.OutputTokens].Level
			if tc.usage {
				require.EqualValues(t, 42, end.Usage.OutputTokens, "the provider's final usage")
				require.InDelta(t, before+4000-42, after, 1, "the unused reservation is given back")
			} else {
				refill := 980 * max(tc.drain, 0).Seconds()
				require.InDelta(t, before+refill, after, 1, "cut first: the whole reservation stands (the bucket only refilled)")
			}
		})
	}
}

// TestAbandonedStreamIsCutAtItsByteBound: a stream its reader left that
// goes on sending without its usage (here endless deltas) is read on only
// to dispatch.AbandonedDrainBytes, however long abandoned_stream_drain
// is: then the upstream is closed and the stream is settled at its worst
// case (no usage; the whole output reservation stands).
func TestAbandonedStreamIsCutAtItsByteBound(t *testing.T) {
	t.Parallel()
	left := make(chan struct{})
	var sent atomic.Int64
	ended := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		defer func() { ended <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n")
		w.(http.Flusher).Flush()
		<-left
		delta := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
			strings.Repeat("x", 4000) + "\"}}\n\n")
		for r.Context().Err() == nil {
			n, err := w.Write(delta)
			sent.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	d, _, _ := start(t, &upstream{Server: &httptest.Server{URL: srv.URL}}, func(c *dispatch.Config) {
		c.AbandonedStreamDrain = time.Hour // the byte bound ends it first
		c.Limits.OutputTokensPerMinute = 60_000
	})
	ctx, cancel := context.WithCancel(context.Background())
	req := request()
	req.Body = []byte(`{"model":"claude-sonnet-4-5","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	req.Cost.OutputTokens = 4000
	resp, err := d.Do(ctx, req)
	require.NoError(t, err)
	_, err = resp.Body.Read(make([]byte, 64))
	require.NoError(t, err)
	before := d.Snapshot().Buckets[flow.OutputTokens].Level
	cancel() // the reader leaves; the provider streams on without end
	require.NoError(t, resp.Body.Close())
	close(left)
	select {
	case <-resp.Ended():
	case <-time.After(time.Minute):
		t.Fatal("the abandoned stream was never cut")
	}
	<-ended
	end, ok := resp.End()
	require.True(t, ok)
	require.True(t, end.Abandoned)
	require.False(t, end.HasUsage, "cut before its usage")
	require.GreaterOrEqual(t, sent.Load(), int64(dispatch.AbandonedDrainBytes), "read on to its byte bound")
	require.InDelta(t, before, d.Snapshot().Buckets[flow.OutputTokens].Level, 1,
		"settled at its worst case: the whole reservation stands (the fake clock never moved)")
}
