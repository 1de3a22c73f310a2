package dispatch_test

import (
	"context"
	"errors"
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
	"github.com/sluicehq/sluice/internal/llm"
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

// TestCountTokens429sLeaveTheModelRouteAlone: on either protocol, a
// provider whose counting limit is below the configured one answers 429
// on counting: that key's counting bucket alone is paused (the next count
// before its retry-after is Sluice's own 429, with no call), while the
// model route keeps its quota, its breaker stays closed, it is not paused,
// and every message is served at its first attempt. Once the retry-after
// has passed, counting is served again.
func TestCountTokens429sLeaveTheModelRouteAlone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		proto llm.Protocol
		path  string
		body  string
		lim   mock.Limits
	}{
		{"anthropic", llm.Anthropic, "/v1/messages/count_tokens",
			`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"how many tokens is this?"}]}`,
			mock.Limits{RPM: 600, ITPM: 1_000_000, OTPM: 1_000_000, CountTokensRPM: 6}},
		{"openai", llm.OpenAI, "/v1/responses/input_tokens", `{"model":"gpt-4.1","input":"how many tokens is this?"}`,
			mock.Limits{RPM: 600, TPM: 1_000_000, CountTokensRPM: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The mock counts 6 a minute, 10 s deep: one at a time, then
			// one every 10 s. Sluice is told 600 a minute.
			p := newPoolRig(t, mock.Config{Limits: tt.lim, BurstSeconds: 10},
				upcfg.Config{Protocol: tt.proto, BurstSeconds: 10, Limits: upcfg.Limits{RequestsPerMinute: 600, CountTokensPerMinute: 600}})
			count := func() (*dispatch.Response, error) {
				resp, err := p.d.CountTokens(context.Background(), &dispatch.Request{Method: http.MethodPost, Path: tt.path,
					Header: http.Header{}, Body: []byte(tt.body), Deadline: p.fc.Now().Add(5 * time.Second)})
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				return resp, err
			}
			// Another user of the key takes the provider's one count; then
			// Sluice's is the provider's 429, whose retry-after (10 s) is
			// past the request's deadline (5 s): Sluice answers its own 429.
			other := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			other.Header.Set("x-api-key", "sk-pool")
			other.Header.Set("Authorization", "Bearer sk-pool")
			rec := httptest.NewRecorder()
			p.mock.Handler().ServeHTTP(rec, other)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			_, err := count()
			var de *dispatch.Error
			require.ErrorAs(t, err, &de)
			require.ErrorIs(t, err, dispatch.ErrShed)
			require.Equal(t, http.StatusTooManyRequests, de.Status)
			require.Positive(t, de.RetryAfter)
			require.EqualValues(t, 1, status429(p.mock.Stats()), "the provider answered 429 on counting")
			// Paused: the next count is refused without a call.
			_, err = count()
			require.ErrorIs(t, err, dispatch.ErrShed)
			require.EqualValues(t, 1, status429(p.mock.Stats()))

			s := p.d.Snapshot()
			require.Equal(t, flow.Closed, s.Breaker, "a counting 429 is not the model route's health")
			require.False(t, s.PausedUntil.After(p.fc.Now()), "the model route is not paused")
			require.InDelta(t, 1.0, s.RateScale, 1e-9)
			require.InDelta(t, s.Buckets[flow.Requests].Depth, s.Buckets[flow.Requests].Level, 0.01, "counting took nothing from the model route's quota")

			_, res := p.drain(t, 20, nil)
			for _, r := range res {
				require.NoError(t, r.err)
				require.Equal(t, http.StatusOK, r.resp.StatusCode)
				require.Equal(t, 1, r.resp.Attempts, "no message met a 429 or waited on one")
			}
			require.EqualValues(t, 1, status429(p.mock.Stats()), "the messages saw no 429")

			p.fc.Set(t0.Add(11 * time.Second))
			resp, err := count()
			require.NoError(t, err, "past the retry-after, counting is served again")
			require.Equal(t, http.StatusOK, resp.StatusCode)
		})
	}
}
