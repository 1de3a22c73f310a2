package dispatch_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// contentThen is the start of a stream up to its first content.
const contentThen = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_3\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n"

// streamEnding is how a scripted stream ends after its first content.
type streamEnding int

const (
	endReset      streamEnding = iota // the connection breaks (unexpected EOF)
	endEOF                            // a clean end of body, no final event
	endOverloaded                     // event: error overloaded_error
	endAPIError                       // event: error api_error
	endRateLimit                      // event: error rate_limit_error
)

// newStreamUpstream answers every call with a stream that sends content,
// then ends as the next entry of endings says (the last one repeats).
func newStreamUpstream(t *testing.T, endings ...streamEnding) *httptest.Server {
	t.Helper()
	var calls atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		e := endings[min(int(calls.Add(1))-1, len(endings)-1)]
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, contentThen)
		w.(http.Flusher).Flush()
		switch e {
		case endReset:
			panic(http.ErrAbortHandler) // the connection is cut mid-body
		case endEOF:
		case endOverloaded:
			_, _ = io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
		case endAPIError:
			_, _ = io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\n\n")
		case endRateLimit:
			_, _ = io.WriteString(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"}}\n\n")
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestMidStreamErrorsAndTheBreaker: after content reached the client, only
// an error event that reports an overload or a server error counts toward
// the breaker (provider.StreamErrorHealth); resets, clean ends without the
// final event and other error events do not, however many there are. An
// overloaded_error also lowers the adaptive concurrency limit.
func TestMidStreamErrorsAndTheBreaker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ending   streamEnding
		opens    bool
		lowersCL bool
	}{
		{"reset after content", endReset, false, false},
		{"eof after content", endEOF, false, false},
		{"rate_limit_error event", endRateLimit, false, false},
		{"api_error event", endAPIError, true, false},
		{"overloaded_error event", endOverloaded, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newStreamUpstream(t, tt.ending)
			d, _, rec := start(t, &upstream{Server: srv}, func(c *dispatch.Config) {
				c.Breaker.ConsecutiveFailures = 3
				c.Breaker.OpenTimeout = time.Hour
			})
			limit := d.Snapshot().ConcurrencyLimit
			for i := range 6 {
				r := request()
				r.Body = []byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
				resp, err := d.Do(context.Background(), r)
				if tt.opens && i >= 3 {
					require.ErrorIs(t, err, dispatch.ErrUnavailable, "the breaker opened after 3 failures")
					continue
				}
				require.NoError(t, err, i)
				_, _ = io.ReadAll(resp.Body)
				require.NoError(t, resp.Body.Close())
				end, ok := resp.End()
				require.True(t, ok)
				require.Equal(t, llm.StreamFail, end.Outcome.Kind)
			}
			snap := d.Snapshot()
			if tt.opens {
				require.Equal(t, flow.Open, snap.Breaker)
				require.Equal(t, []string{"closed>open"}, rec.breaker)
			} else {
				require.Equal(t, flow.Closed, snap.Breaker)
				require.Empty(t, rec.breaker)
			}
			if tt.lowersCL {
				require.Less(t, snap.ConcurrencyLimit, limit)
			} else {
				require.Equal(t, limit, snap.ConcurrencyLimit)
			}
		})
	}
}

// TestDrainFailsQueuedLiveRequestsAtOnce: Drain answers every Do waiting in
// line with ErrStopped at once, refuses later ones, and leaves tickets
// alone: a job worker's Acquire queued behind is admitted when the slot
// frees.
func TestDrainFailsQueuedLiveRequestsAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okMessage)
	}))
	t.Cleanup(srv.Close)
	d, _, _ := start(t, &upstream{Server: srv}, func(c *dispatch.Config) {
		c.Limits.MaxConcurrency = 1
		c.MinConcurrency = 1
	})
	first := doAsync(context.Background(), d, request())
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	queued := doAsync(context.Background(), d, request())
	type acquired struct {
		t   *dispatch.Ticket
		err error
	}
	ticket := make(chan acquired, 1)
	go func() {
		tk, err := d.Acquire(context.Background(), dispatch.AcquireParams{Priority: llm.Low})
		ticket <- acquired{tk, err}
	}()
	require.Eventually(t, func() bool {
		q := d.Snapshot().Queued
		return q[llm.Normal] == 1 && q[llm.Low] == 1
	}, 5*time.Second, time.Millisecond)

	require.Equal(t, 1, d.Drain())
	res := <-queued // at once: the call in flight is still held
	require.ErrorIs(t, res.err, dispatch.ErrStopped)
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.Equal(t, "the gateway is shutting down", de.Message)
	_, err := d.Do(context.Background(), request())
	require.ErrorIs(t, err, dispatch.ErrStopped, "a later Do is refused")

	close(release)
	require.NoError(t, (<-first).err, "the request already sent finishes")
	got := <-ticket
	require.NoError(t, got.err, "the ticket was not drained")
	got.t.Release()
}
