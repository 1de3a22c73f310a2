package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// stepGate is a Gate written for these tests: one request every step and
// at most slots in flight.
type stepGate struct {
	step  time.Duration
	slots int

	mu       sync.Mutex
	next     time.Time
	inflight int
	done     []dispatch.GateEnd
}

func (g *stepGate) Take(_ provider.Cost, now time.Time) (dispatch.GateWait, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.slots > 0 && g.inflight >= g.slots {
		return dispatch.GateWait{Slot: true, Limit: fmt.Sprintf("client a's max_concurrency (%d)", g.slots)}, nil
	}
	if now.Before(g.next) {
		return dispatch.GateWait{For: g.next.Sub(now), Limit: "client a's requests_per_minute (30)"}, nil
	}
	g.next = now.Add(g.step)
	g.inflight++
	return dispatch.GateWait{}, nil
}

func (g *stepGate) Done(_ provider.Cost, end dispatch.GateEnd, _ time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	g.done = append(g.done, end)
}

func (g *stepGate) Predict(requests, _ float64, now time.Time) (time.Duration, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := time.Duration(requests-1) * g.step
	if now.Before(g.next) {
		w += g.next.Sub(now)
	}
	return max(w, 0), "client a's requests_per_minute (30)"
}

// TestGateHoldsItsClientInTheQueue: a client over its own limit waits in
// the upstream's queue, counted and explained, and its queue wait is the
// whole wait; other clients of the same class go ahead at once.
func TestGateHoldsItsClientInTheQueue(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, _ := start(t, u, nil)
	g := &stepGate{step: 2 * time.Second}
	var as []<-chan result
	for range 4 {
		r := request()
		r.Priority, r.Client, r.Gate, r.Deadline = llm.Critical, "a", g, t0.Add(time.Minute)
		as = append(as, doAsync(context.Background(), d, r))
	}
	require.Eventually(t, func() bool { return d.Snapshot().Queued[llm.Critical] == 3 }, 5*time.Second, time.Millisecond,
		"the client's three other requests wait in the queue, counted in their class")
	x := d.Explain()
	require.Len(t, x.Held, 1)
	require.Equal(t, dispatch.HeldClient{Class: llm.Critical, Client: "a", Queued: 3, Limit: "client a's requests_per_minute (30)", Until: t0.Add(2 * time.Second)}, x.Held[0])
	require.Equal(t, dispatch.WaitReason{Reason: dispatch.WaitClientLimit, Client: "a", Limit: "client a's requests_per_minute (30)",
		Until: t0.Add(2 * time.Second)}, x.Waiting, "what waits is held by its client's limit, and the status says so")
	for range 3 {
		r := request()
		r.Priority, r.Client = llm.Critical, "b"
		res := <-doAsync(context.Background(), d, r)
		require.NoError(t, res.err)
		require.Zero(t, res.resp.QueueWait, "another client goes at once")
	}
	// The four arrived in some order: they were admitted 2 s apart.
	var waits []time.Duration
	for _, ch := range as {
		var res result
		stepUntil(t, fc, 1, func() bool {
			select {
			case res = <-ch:
				return true
			default:
				return false
			}
		})
		require.NoError(t, res.err)
		waits = append(waits, res.resp.QueueWait)
	}
	slices.Sort(waits)
	for i, w := range waits {
		require.GreaterOrEqual(t, w, time.Duration(i)*2*time.Second, "the %d-th waited its turn: %v", i, waits)
		require.Less(t, w, time.Duration(i)*2*time.Second+100*time.Millisecond, "%v", waits)
	}
	require.Eventually(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.done) == 4 }, 5*time.Second, time.Millisecond)
	for _, e := range g.done {
		require.True(t, e.Sent)
		require.NotNil(t, e.Usage, "charged at the usage the answer reported")
	}
}

// TestGateShedsAtOnceWhenItsRoomComesTooLate: a request its client's own
// limit would hold past its deadline is refused at once, 429 naming the
// limit, with retry-after from the client's room; one held until its
// deadline anyway is refused the same way, not as a quota wait.
func TestGateShedsAtOnceWhenItsRoomComesTooLate(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, fc, rec := start(t, u, nil)
	g := &stepGate{step: 10 * time.Second}
	first := request()
	first.Client, first.Gate = "a", g
	require.NoError(t, (<-doAsync(context.Background(), d, first)).err)
	late := request()
	late.Client, late.Gate, late.Deadline = "a", g, t0.Add(5*time.Second)
	res := <-doAsync(context.Background(), d, late)
	var de *dispatch.Error
	require.ErrorAs(t, res.err, &de)
	require.ErrorIs(t, de, dispatch.ErrClientLimit)
	require.Equal(t, http.StatusTooManyRequests, de.Status)
	require.Equal(t, "rate_limit_error", de.Type)
	require.Contains(t, de.Message, "client a's requests_per_minute (30)")
	require.Equal(t, dispatch.MaxClientRetryAfter, de.RetryAfter, "10 s, capped")
	require.Zero(t, fc.Now().Sub(t0), "answered at once")
	require.ErrorIs(t, rec.shed[len(rec.shed)-1], dispatch.ErrClientLimit)
	require.EqualValues(t, 1, u.calls.Load(), "nothing was sent for it")
}

// TestGateSlotsReleaseHeldRequests: with every one of its slots taken, a
// client's next request waits until one of its requests ends, whatever
// the clock.
func TestGateSlotsReleaseHeldRequests(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, ok())
	d, _, _ := start(t, u, nil)
	g := &stepGate{slots: 1}
	r1 := request()
	r1.Client, r1.Gate = "a", g
	resp, err := d.Do(context.Background(), r1)
	require.NoError(t, err)
	r2 := request()
	r2.Client, r2.Gate = "a", g
	second := doAsync(context.Background(), d, r2)
	require.Eventually(t, func() bool { return len(d.Explain().Held) == 1 }, 5*time.Second, time.Millisecond)
	require.True(t, d.Explain().Held[0].Until.IsZero(), "held until a slot frees")
	require.Equal(t, "client a's max_concurrency (1)", d.Explain().Held[0].Limit)
	require.NoError(t, resp.Body.Close()) // the first request ends
	res := <-second
	require.NoError(t, res.err)
	require.Zero(t, g.inflight)
}
