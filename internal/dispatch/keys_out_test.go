package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

// TestEveryKeyRejectedIsAnOutage: when the provider rejects every key of
// the pool (one key or several; revoked, forbidden or out of credit), the
// client gets the protocol's outage answer naming the cause, never the
// provider's 401/403/spend-cap answer, which a client reads as its own
// fault; each key is tried once, and the upstream says it is unavailable.
func TestEveryKeyRejectedIsAnOutage(t *testing.T) {
	t.Parallel()
	const (
		revoked  = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
		denied   = `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`
		spendCap = `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your API usage limits","details":{"error_code":"enforced_spend_limit_reached"}}}`
		openai   = `{"error":{"message":"Incorrect API key provided: sk-upstr****","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	)
	tests := []struct {
		name     string
		protocol llm.Protocol
		keys     int
		rep      reply
		status   int
		cause    string
	}{
		{"one key revoked", llm.Anthropic, 1, reply{status: 401, body: revoked}, 529, "invalid x-api-key"},
		{"one key out of credit", llm.Anthropic, 1, reply{status: 429, body: spendCap}, 529, "usage limits"},
		{"two keys forbidden", llm.Anthropic, 2, reply{status: 403, body: denied}, 529, "permission"},
		{"openai key revoked", llm.OpenAI, 1, reply{status: 401, body: openai}, 503, "Incorrect API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, tt.rep)
			d, _, _ := start(t, u, func(c *dispatch.Config) {
				c.Protocol = tt.protocol
				c.KeyProbeInterval = time.Minute
				if tt.keys > 1 {
					c.APIKey, c.APIKeys = "", keys(tt.keys)
				}
			})
			require.Nil(t, d.PassOutage(), "a key is in: pass-throughs go on")
			r := request()
			if tt.protocol == llm.OpenAI {
				r.Path = "/v1/chat/completions"
			}
			r.Deadline = t0.Add(30 * time.Second) // before the next key probe
			res := <-doAsync(context.Background(), d, r)
			var de *dispatch.Error
			require.True(t, errors.As(res.err, &de), "an engine error, not the provider's answer: %v", res.err)
			require.ErrorIs(t, de, dispatch.ErrUnavailable)
			require.Equal(t, tt.status, de.Status)
			require.Contains(t, de.Message, "rejected every key")
			require.Contains(t, de.Message, tt.cause)
			require.Contains(t, de.Message, "next key probe in 1m0s")
			require.Equal(t, time.Minute, de.RetryAfter)
			require.Equal(t, 0, de.Attempts-tt.keys, "one try per key, none burnt on a retry")
			require.EqualValues(t, tt.keys, u.calls.Load())
			require.True(t, d.Unavailable())
			po := d.PassOutage() // what a pass-through is answered now
			require.ErrorIs(t, po, dispatch.ErrUnavailable)
			require.Equal(t, tt.status, po.Status)
			require.Contains(t, po.Message, tt.cause)
			require.Equal(t, time.Minute, po.RetryAfter)
			for _, k := range d.Keys() {
				require.True(t, k.Out, "%+v", k)
			}

			// A request arriving now is answered at once, without a call.
			r = request()
			if tt.protocol == llm.OpenAI {
				r.Path = "/v1/chat/completions"
			}
			r.Deadline = t0.Add(30 * time.Second)
			res = <-doAsync(context.Background(), d, r)
			require.ErrorIs(t, res.err, dispatch.ErrUnavailable)
			require.EqualValues(t, tt.keys, u.calls.Load())
		})
	}
}

// TestRejectedKeysHoldTicketsUntilOneReturns: while the provider rejects
// every key, a ticket (a job) waits for the next key probe, burning
// nothing, and is admitted by it; a live request is answered at once
// unless a probe is due, which it then is. Once the provider accepts the
// key again the probe brings it back.
func TestRejectedKeysHoldTicketsUntilOneReturns(t *testing.T) {
	t.Parallel()
	revoked := reply{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`}
	u := newUpstream(t, revoked, revoked, ok())
	d, fc, _ := start(t, u, func(c *dispatch.Config) { c.KeyProbeInterval = time.Minute })

	// A job's ticket meets the rejection first: handed back, not sent.
	tk, err := d.Acquire(context.Background(), dispatch.AcquireParams{Priority: llm.Low})
	require.NoError(t, err)
	_, err = tk.Call(context.Background(), request())
	var de *dispatch.Error
	require.True(t, errors.As(err, &de), "%v", err)
	require.ErrorIs(t, de, dispatch.ErrNotAdmitted)
	require.Contains(t, de.Message, "rejected every key")
	require.Equal(t, time.Minute, de.RetryAfter, "held for the next key probe")
	_, sent := de.Outcome()
	require.False(t, sent, "a rejected key burns no attempt of the job")

	// The next ticket waits for the probe; a live request does not wait.
	type acquired struct {
		t   *dispatch.Ticket
		err error
	}
	next := make(chan acquired, 1)
	go func() {
		t, err := d.Acquire(context.Background(), dispatch.AcquireParams{Priority: llm.Low})
		next <- acquired{t, err}
	}()
	require.True(t, fc.WaitForTimers(1, 5*time.Second), "the loop waits for the probe")
	r := request()
	r.Deadline = t0.Add(10 * time.Minute)
	res := <-doAsync(context.Background(), d, r)
	require.ErrorIs(t, res.err, dispatch.ErrUnavailable)
	require.EqualValues(t, 1, u.calls.Load())

	fc.Advance(time.Minute) // the probe is due: the waiting ticket takes it
	a := <-next
	require.NoError(t, a.err)
	_, err = a.t.Call(context.Background(), request())
	require.True(t, errors.As(err, &de), "%v", err)
	require.ErrorIs(t, de, dispatch.ErrNotAdmitted, "still rejected: handed back again")
	require.EqualValues(t, 2, u.calls.Load())
	require.True(t, d.Keys()[0].Out)

	fc.Advance(time.Minute) // the provider accepts the key again; a live request is the probe
	res = <-doAsync(context.Background(), d, request())
	require.NoError(t, res.err)
	require.Equal(t, 200, res.resp.StatusCode)
	require.Equal(t, 1, res.resp.Attempts)
	require.False(t, d.Keys()[0].Out)
	require.False(t, d.Unavailable())
}
