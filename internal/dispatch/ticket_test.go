package dispatch_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	upcfg "github.com/sluicehq/sluice/upstream"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

var overloaded = reply{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}

func acquireAsync(d *dispatch.Dispatcher, p dispatch.AcquireParams) <-chan *dispatch.Ticket {
	ch := make(chan *dispatch.Ticket, 1)
	go func() {
		t, err := d.Acquire(context.Background(), p)
		if err != nil {
			t = nil
		}
		ch <- t
	}()
	return ch
}

func callAndClose(t *testing.T, tk *dispatch.Ticket) {
	t.Helper()
	resp, err := tk.Call(context.Background(), request())
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

// TestAcquireWaitsInClassOrderWithLiveRequests: tickets wait in the same
// scheduler as live requests, so a critical ticket goes before a normal
// live request, which goes before a low ticket.
func TestAcquireWaitsInClassOrderWithLiveRequests(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, func(c *dispatch.Config) { c.Limits.MaxConcurrency, c.MinConcurrency = 1, 1 })
	blocker, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Low})
	require.True(t, ok)

	low := acquireAsync(d, dispatch.AcquireParams{Priority: llm.Low, Client: "jobs"})
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Low] == 1 }, 5*time.Second, time.Millisecond)
	live := doAsync(context.Background(), d, request()) // normal
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Normal] == 1 }, 5*time.Second, time.Millisecond)
	crit := acquireAsync(d, dispatch.AcquireParams{Priority: llm.Critical, Client: "jobs"})
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Critical] == 1 }, 5*time.Second, time.Millisecond)

	blocker.Release()
	c := <-crit
	require.NotNil(t, c, "the critical ticket goes first")
	require.Zero(t, u.calls.Load(), "the live request still waits")
	require.Equal(t, llm.Critical, c.Priority())
	callAndClose(t, c)
	res := <-live
	require.NoError(t, res.err)
	require.EqualValues(t, 2, u.calls.Load())
	l := <-low
	require.NotNil(t, l, "the low ticket goes last")
	l.Release()
	require.Zero(t, d.Snapshot().InFlight)
}

// TestReleaseRefundsEverything: a released ticket gives back its slot and
// its whole reservation; a second Release and a Call after it do nothing.
func TestReleaseRefundsEverything(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, func(c *dispatch.Config) { c.Limits.InputTokensPerMinute = 60000 })
	before := d.Snapshot().Buckets[flow.InputTokens].Level
	tk, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Normal, Cost: provider.Cost{InputTokens: 1000}})
	require.True(t, ok)
	s := d.Snapshot()
	require.Equal(t, 1, s.InFlight)
	require.InDelta(t, before-1000, s.Buckets[flow.InputTokens].Level, 0.5)
	tk.Release()
	tk.Release()
	s = d.Snapshot()
	require.Zero(t, s.InFlight)
	require.InDelta(t, before, s.Buckets[flow.InputTokens].Level, 0.5)
	_, err := tk.Call(context.Background(), request())
	require.Error(t, err)
	require.Zero(t, u.calls.Load())
}

// TestTryAcquireNeverWaits: TryAcquire grants only what is admissible at
// once: not past a request waiting in line, not without a free slot, not
// over the quota, not while the breaker is open.
func TestTryAcquireNeverWaits(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, overloaded)
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Limits.MaxConcurrency, c.MinConcurrency = 2, 1
		c.Limits.InputTokensPerMinute = 6000 // ~490 tokens deep
		c.Breaker = upcfg.Breaker{ConsecutiveFailures: 1, OpenTimeout: time.Hour, HalfOpenProbes: 1}
	})
	p := dispatch.AcquireParams{Priority: llm.Critical, Cost: provider.Cost{InputTokens: 10}}

	big, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Critical, Cost: provider.Cost{InputTokens: 480}})
	require.True(t, ok)
	_, ok = d.TryAcquire(dispatch.AcquireParams{Priority: llm.Critical, Cost: provider.Cost{InputTokens: 100}})
	require.False(t, ok, "over the quota")
	big.Release()

	held, ok := d.TryAcquire(p)
	require.True(t, ok)
	other, ok := d.TryAcquire(p)
	require.True(t, ok)
	_, ok = d.TryAcquire(p)
	require.False(t, ok, "no free slot")
	defer other.Release()
	waiting := acquireAsync(d, dispatch.AcquireParams{Priority: llm.Low})
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Low] == 1 }, 5*time.Second, time.Millisecond)
	held.Release()
	w := <-waiting
	require.NotNil(t, w)
	w.Release()
	other.Release()

	// One 529 opens the breaker.
	tk, ok := d.TryAcquire(p)
	require.True(t, ok)
	_, err := tk.Call(context.Background(), request())
	require.ErrorIs(t, err, dispatch.ErrCallFailed)
	require.Equal(t, flow.Open, d.Snapshot().Breaker)
	_, ok = d.TryAcquire(p)
	require.False(t, ok, "the breaker is open")
	require.Zero(t, fc.Timers(), "nothing ever waited on the clock")
	require.EqualValues(t, 1, u.calls.Load())
}

// TestProbeTicketMakesOneCall: once the breaker half-opens, the waiting
// ticket is its probe; its call is exactly one upstream call, whose
// failure comes back with its outcome and no retry.
func TestProbeTicketMakesOneCall(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, overloaded)
	d, fc, _ := start(t, u, func(c *dispatch.Config) {
		c.Breaker = upcfg.Breaker{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1}
	})
	first, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Normal})
	require.True(t, ok)
	require.False(t, first.Probe())
	_, err := first.Call(context.Background(), request())
	require.ErrorIs(t, err, dispatch.ErrCallFailed)

	ch := acquireAsync(d, dispatch.AcquireParams{Priority: llm.Normal})
	var probe *dispatch.Ticket
	for range 100 {
		select {
		case probe = <-ch:
		case <-time.After(20 * time.Millisecond):
			fc.Advance(500 * time.Millisecond)
			continue
		}
		break
	}
	require.NotNil(t, probe, "admitted once the breaker half-opened")
	require.True(t, probe.Probe())
	_, err = probe.Call(context.Background(), request())
	var de *dispatch.Error
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, dispatch.ErrCallFailed)
	out, sent := de.Outcome()
	require.True(t, sent)
	require.Equal(t, llm.Overload, out.Kind)
	require.Equal(t, 1, de.Attempts)
	require.EqualValues(t, 2, u.calls.Load(), "one call per ticket, no retry")
	require.Equal(t, flow.Open, d.Snapshot().Breaker, "the failed probe opened the breaker again")
}

// TestCallWithLargerCostGivesTheTicketBack: when the real request costs
// more than the ticket reserved and the extra does not fit now, nothing is
// sent: the ticket is given back and the error says when it would fit.
func TestCallWithLargerCostGivesTheTicketBack(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, func(c *dispatch.Config) { c.Limits.InputTokensPerMinute = 6000 })
	tk, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Normal, Cost: provider.Cost{InputTokens: 10}})
	require.True(t, ok)
	r := request()
	r.Cost.InputTokens = 2000 // fits the capacity, not the ~490 left now
	_, err := tk.Call(context.Background(), r)
	var de *dispatch.Error
	require.ErrorAs(t, err, &de)
	require.True(t, errors.Is(err, dispatch.ErrNotAdmitted))
	_, sent := de.Outcome()
	require.False(t, sent)
	require.Positive(t, de.RetryAfter)
	require.Zero(t, u.calls.Load())
	require.Zero(t, d.Snapshot().InFlight)
}

// TestTicketQueueWaitIsTheWaitForAdmission: a ticket's call reports the
// time it waited for admission, not the time since the epoch.
func TestTicketQueueWaitIsTheWaitForAdmission(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, nil)
	tk, ok := d.TryAcquire(dispatch.AcquireParams{Priority: llm.Low, Cost: request().Cost})
	require.True(t, ok)
	resp, err := tk.Call(context.Background(), request())
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Zero(t, resp.QueueWait)
}
