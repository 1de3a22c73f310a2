package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// countTokensRequest is a token-counting request with the given deadline.
func countTokensRequest(deadline time.Time) *dispatch.Request {
	return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages/count_tokens", Header: http.Header{},
		Body: []byte(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"how many tokens is this?"}]}`), Deadline: deadline}
}

// TestCountTokensFloodLeavesMessagesAlone: a flood of token-counting
// requests far beyond their own limit (60 a minute on each of two keys,
// 600 sent at once) while 150 messages drain on their limits: the
// messages see no provider 429 and drain in the same (fake) time as
// without the flood; each key's counting bucket is learned from one probe,
// so the provider answers no 429 at all; every counting request gets the provider's count or,
// when no key's counting bucket has room before its deadline, a 429 of
// Sluice's own with retry-after, never the provider's 429.
func TestCountTokensFloodLeavesMessagesAlone(t *testing.T) {
	t.Parallel()
	const n, flood = 150, 600
	lim := mock.Limits{RPM: 60, CountTokensRPM: 60}
	run := func(withFlood bool) (time.Duration, mock.Stats, int, int) {
		// The drain steps the fake clock while counting requests are on
		// their way, up to a second at a time: a report read after a step
		// is as of an instant up to a step after the send, which only a
		// jitter allowance that long keeps Observe from crediting twice
		// (in production the clock does not jump; the default is 100 ms).
		p := newPoolRig(t, mock.Config{Limits: lim, BurstSeconds: 5},
			upcfg.Config{APIKeys: keys(2), Limits: upcfg.Limits{RequestsPerMinute: 60}, JitterAllowance: 2 * time.Second})
		var counted, shed atomic.Int32
		var floodDone atomic.Int32
		if withFlood {
			for range flood {
				go func() {
					defer floodDone.Add(1)
					resp, err := p.d.CountTokens(context.Background(), countTokensRequest(t0.Add(20*time.Second)))
					if err != nil {
						var de *dispatch.Error
						if errors.As(err, &de) && errors.Is(err, dispatch.ErrShed) && de.Status == http.StatusTooManyRequests && de.RetryAfter > 0 {
							shed.Add(1)
						}
						return
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusOK && len(b) > 0 {
						counted.Add(1)
					}
				}()
			}
			// Every counting request has taken its token or is waiting
			// on the clock before the messages start.
			waitQuiet(t, 20*time.Second, func() bool {
				return int(floodDone.Load())+p.fc.Timers() >= flood
			})
		}
		took, res := p.drain(t, n, nil)
		for _, r := range res {
			require.NoError(t, r.err)
			require.Equal(t, http.StatusOK, r.resp.StatusCode)
			require.Equal(t, 1, r.resp.Attempts, "no message met a 429")
		}
		if withFlood {
			for int(floodDone.Load()) < flood {
				next, ok := p.fc.Next()
				require.True(t, ok)
				p.fc.Set(next)
				waitQuiet(t, 20*time.Second, func() bool { return int(floodDone.Load())+p.fc.Timers() >= flood })
			}
		}
		return took, p.mock.Stats(), int(counted.Load()), int(shed.Load())
	}
	quiet, _, _, _ := run(false)
	took, st, counted, shed := run(true)
	t.Logf("messages drained in %v alone, %v beside the flood; counting: %d counted, %d answered 429 by Sluice; provider: %v",
		quiet, took, counted, shed, st.Overall.ByStatus)
	// Each key sends a message a second: a flood that took one slot would
	// cost a second. Less than that is the drain's own event order.
	require.LessOrEqual(t, took, quiet+500*time.Millisecond, "the flood does not delay the messages")
	require.Equal(t, flood, counted+shed, "every counting request has its count or Sluice's 429")
	require.Positive(t, counted)
	require.Positive(t, shed)
	require.EqualValues(t, n, st.Overall.ByEndpoint[mock.EndpointMessages])
	require.EqualValues(t, counted, st.Overall.ByEndpoint[mock.EndpointCountTokens])
	require.Zero(t, st.Overall.ByStatus["429"], "each key's counting bucket is learned from one probe before the flood goes out")
}
