package jobs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// claimCounter counts claude's Claim calls (other upstreams' workers claim
// when they start, whenever they are scheduled) and keeps claude's last
// Handoff.
type claimCounter struct {
	jobstore.Store
	claims   atomic.Int64
	backlogs atomic.Int64 // claude's backlog reads: one per poll
	handoff  atomic.Pointer[jobstore.Handoff]
}

func (c *claimCounter) Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error) {
	if upstream == "claude" {
		c.backlogs.Add(1)
	}
	return c.Store.Backlog(ctx, upstream, now, limit)
}

// waitPolls returns once claude's worker has read the backlog n more
// times: n polls have passed.
func (c *claimCounter) waitPolls(t *testing.T, n int64) {
	t.Helper()
	target := c.backlogs.Load() + n
	require.Eventually(t, func() bool { return c.backlogs.Load() >= target }, 10*time.Second, time.Millisecond, "%d polls", n)
}

func (c *claimCounter) Handoff(p jobstore.HandoffParams) (*jobstore.Handoff, error) {
	h, err := c.Store.Handoff(p)
	if err == nil && p.Upstream == "claude" {
		c.handoff.Store(h)
	}
	return h, err
}

func (c *claimCounter) Claim(ctx context.Context, p jobstore.ClaimParams) ([]*jobstore.Job, error) {
	if p.Upstream == "claude" {
		c.claims.Add(1)
	}
	return c.Store.Claim(ctx, p)
}

// TestIdleWorkerTakesSubmitsWithoutClaiming: jobs submitted while the
// upstream's worker is idle are leased in the insert and run without a
// claim; jobs submitted while it is busy queue and are claimed later.
func TestIdleWorkerTakesSubmitsWithoutClaiming(t *testing.T) {
	t.Parallel()
	st := &claimCounter{Store: openStore(t)}
	release := make(chan struct{})
	d := &fakeDispatcher{fn: func(ctx context.Context, _ *dispatch.Request) (*dispatch.Response, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		return reply(200, okMessage), nil
	}}
	s := newService(t, st, d, nil, func(c *Config) { c.PollInterval = time.Hour; c.MaxInFlightPerUpstream = 2 })
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the service stops, even when the test fails
	require.Eventually(t, func() bool {
		h := st.handoff.Load()
		return h != nil && h.Offered() == 2
	}, 10*time.Second, time.Millisecond, "the idle worker offers its two slots")
	before := st.claims.Load()
	a, b := submit(t, s, ""), submit(t, s, "")
	require.Equal(t, jobstore.StateRunning, a.State, "handed off at submit")
	require.Equal(t, jobstore.StateRunning, b.State)
	require.Equal(t, before, st.claims.Load(), "no claim for handed-off jobs")
	c := submit(t, s, "")
	require.Equal(t, jobstore.StateQueued, c.State, "both slots are busy")
	unblock()
	for _, id := range []int64{a.ID, b.ID, c.ID} {
		require.Equal(t, jobstore.StateSucceeded, await(t, s, id).State)
	}
	require.Greater(t, st.claims.Load(), before, "the queued job was claimed")
	require.Equal(t, 3, d.Calls())
}

// TestIdleWorkerDoesNotClaim: an idle worker reads the backlog on every
// poll but never claims while no class has work: there is nothing to be
// admitted for. A job submitted meanwhile is handed off at once.
func TestIdleWorkerDoesNotClaim(t *testing.T) {
	t.Parallel()
	st := &claimCounter{Store: openStore(t)}
	d := succeed()
	s := newService(t, st, d, nil, func(c *Config) {
		c.PollInterval = 5 * time.Millisecond
		c.MaxInFlightPerUpstream = 4
	})
	require.Eventually(t, func() bool {
		h := st.handoff.Load()
		return h != nil && h.Offered() == 4
	}, 10*time.Second, time.Millisecond, "the idle worker offers its four slots")
	st.waitPolls(t, 10)
	require.Zero(t, st.claims.Load(), "no claim without a backlog")
	j := submit(t, s, "")
	require.Equal(t, jobstore.StateRunning, j.State, "handed off")
	require.Equal(t, jobstore.StateSucceeded, await(t, s, j.ID).State)
	require.Zero(t, st.claims.Load())
}
