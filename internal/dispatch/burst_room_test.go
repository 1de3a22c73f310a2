package dispatch_test

import (
	"context"
	"fmt"
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

// arrivalGroup is n requests of a class arriving together at t0+at:
// request()'s, or with tokens set, of that many input tokens (as the
// mock counts them and as estimated), from client, each with a deadline
// of deadline after it arrives (0: an hour after t0).
type arrivalGroup struct {
	at       time.Duration
	class    llm.Priority
	n        int
	client   string
	tokens   int64
	deadline time.Duration
}

// groupRequest is one request of g.
func groupRequest(g arrivalGroup) *dispatch.Request {
	r := request()
	r.Priority, r.Deadline, r.Client = g.class, t0.Add(time.Hour), g.client
	if g.deadline > 0 {
		r.Deadline = t0.Add(g.at + g.deadline)
	}
	if g.tokens > 0 {
		r.Body = []byte(fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":%q}]}`,
			strings.Repeat("x", int(4*g.tokens))))
		r.Cost.InputTokens = g.tokens
	}
	return r
}

// replay sends each group at its instant on the rig's fake clock, driving
// the clock event by event (as drain does) until every request has ended,
// and returns the results per group. quiet, if set, is called at every
// step while the system is quiet.
func (p *poolRig) replay(t *testing.T, groups []arrivalGroup, quiet func(now time.Time)) [][]result {
	t.Helper()
	var done, sent atomic.Int32
	chans := make([][]<-chan result, len(groups))
	total := 0
	for _, g := range groups {
		total += g.n
	}
	next := 0
	limit := time.Now().Add(2 * time.Minute)
	for int(done.Load()) < total {
		for next < len(groups) && !p.fc.Now().Before(t0.Add(groups[next].at)) {
			g := groups[next]
			for range g.n {
				r := groupRequest(g)
				ch := make(chan result, 1)
				inner := doAsync(context.Background(), p.d, r)
				go func() { res := <-inner; done.Add(1); ch <- res }()
				chans[next] = append(chans[next], ch)
				sent.Add(1)
			}
			next++
		}
		p.settle(t, int(sent.Load()), &done)
		if quiet != nil {
			quiet(p.fc.Now())
		}
		if int(done.Load()) == total {
			break
		}
		step, ok := p.fc.Next()
		if next < len(groups) && (!ok || t0.Add(groups[next].at).Before(step)) {
			step, ok = t0.Add(groups[next].at), true
		}
		require.True(t, ok, "nothing to wait for with %d of %d done", done.Load(), total)
		p.fc.Set(step)
		require.True(t, time.Now().Before(limit), "the replay does not end: %d of %d done", done.Load(), total)
	}
	out := make([][]result, len(groups))
	for i := range chans {
		out[i] = collect(chans[i])
	}
	return out
}

// TestUrgentBurstFindsRoomAfterALongBatch: a batch keeps the upstream
// saturated for minutes while bursts of critical requests come. The
// first, 30 s after start, finds the room the gateway keeps until it has
// seen the urgent classes (BurstRoom.Prime). Long after, once that room
// has decayed, a burst comes unannounced and waits for refill; the ones
// that follow find the room it showed they need and are admitted at
// once. Without the room (burst_room: -1) every burst waits. Once the
// critical class has been quiet for several burst_memory, the batch has
// the whole bucket again.
func TestUrgentBurstFindsRoomAfterALongBatch(t *testing.T) {
	t.Parallel()
	// 60 RPM: 1 a second, 10 in the 10 s bucket (9.8 after the margin).
	// A burst of 4 critical requests needs 4 s of refill.
	const batch = 800
	groups := []arrivalGroup{{at: 0, class: llm.Low, n: batch}, {at: 30 * time.Second, class: llm.Critical, n: 4}}
	for i := range 4 {
		groups = append(groups, arrivalGroup{at: 5*time.Minute + time.Duration(30*i)*time.Second, class: llm.Critical, n: 4})
	}
	run := func(room float64) ([][]result, float64) {
		p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 60}, BurstSeconds: 10},
			upcfg.Config{Limits: upcfg.Limits{RequestsPerMinute: 60}, BurstSeconds: 10, BurstRoom: room, BurstMemory: time.Minute})
		idle := -1.0 // the bucket's level while the batch is queued, long after the last burst
		res := p.replay(t, groups, func(now time.Time) {
			if now.Sub(t0) >= 12*time.Minute && idle < 0 && p.d.Snapshot().Queued[llm.Low] > 0 {
				idle = p.d.Snapshot().Buckets[flow.Requests].Level
			}
		})
		require.Zero(t, status429(p.mock.Stats()), "no provider 429")
		return res, idle
	}
	waits := func(rs []result) (worst time.Duration) {
		for _, r := range rs {
			require.NoError(t, r.err)
			require.Equal(t, 200, r.resp.StatusCode)
			worst = max(worst, r.resp.QueueWait)
		}
		return worst
	}

	res, idle := run(0) // burst_room's default
	for i := range res {
		t.Logf("group %d: worst queue wait %v", i, waits(res[i]))
	}
	t.Logf("level while the batch runs after 12 minutes: %.2f", idle)
	require.Zero(t, waits(res[1]), "the first burst finds the room kept from the start")
	require.Positive(t, waits(res[2]), "once that room decayed, a burst unannounced waits for refill")
	for i := 3; i < len(res); i++ {
		require.Zero(t, waits(res[i]), "burst %d is admitted at once", i)
	}
	require.GreaterOrEqual(t, idle, 0.0, "the batch was still queued 12 minutes in")
	require.Less(t, idle, 1.5, "quiet for long: the batch uses the whole bucket again (level %.2f)", idle)

	batchWait := waits(res[0])

	res, _ = run(-1)
	for i := 1; i < len(res); i++ {
		require.Positive(t, waits(res[i]), "without the room, burst %d waits", i)
	}
	// The room cost the batch the room itself: the last batch request
	// waited at most about the room's 5 s of refill longer.
	t.Logf("the batch's longest wait: %v with the room, %v without", batchWait, waits(res[0]))
	require.LessOrEqual(t, batchWait, waits(res[0])+6*time.Second)
}

// TestSaturatingClassLeavesTheBatchItsShare: normal traffic saturates the
// upstream (far more queued than the quota serves) beside a batch. The
// batch keeps the room primed for urgent bursts, which normal, leaving
// less, would take the bucket below for as long as it saturates: the
// batch got nothing until normal's queue emptied. Once normal has been
// backlogged for SaturatedAfter the batch keeps only what normal keeps,
// and the weights (normal 2, low 1) share the refill: over the first two
// minutes low gets its third, less what normal had alone at first. (It
// got a sixth before.)
func TestSaturatingClassLeavesTheBatchItsShare(t *testing.T) {
	t.Parallel()
	const normal, low = 400, 200
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 60}, BurstSeconds: 10},
		upcfg.Config{Limits: upcfg.Limits{RequestsPerMinute: 60}, BurstSeconds: 10})
	res := p.replay(t, []arrivalGroup{{at: 0, class: llm.Normal, n: normal}, {at: 0, class: llm.Low, n: low}}, nil)
	require.Zero(t, status429(p.mock.Stats()), "no provider 429")
	const window = 2 * time.Minute
	served := func(rs []result) (n int) {
		for _, r := range rs {
			require.NoError(t, r.err)
			require.Equal(t, 200, r.resp.StatusCode)
			if r.resp.QueueWait <= window {
				n++
			}
		}
		return n
	}
	n, l := served(res[0]), served(res[1])
	t.Logf("served in the first %v: normal %d, low %d", window, n, l)
	share := float64(l) / float64(n+l)
	// Before normal counts as saturating (SaturatedAfter) it has the
	// full bucket and the refill to itself: about 15 of the 130 served.
	first := 10 + dispatch.SaturatedAfter.Seconds()
	require.Greater(t, share, (1.0/3)*(1-first/(window.Seconds()+10)),
		"low gets its weighted share (1/3) while normal saturates, less what normal had alone at first")
	require.Less(t, share, 0.4, "and no more than its share")
}

// TestSteadyUrgentTrafficKeepsNoRoom: critical requests arrive steadily,
// each reserving max_tokens (100) of an output quota that refills 100 a
// second while the provider generates 10: their reservations, 150 a
// second, exceed the refill; what they use, 15 a second, is far below it.
// The room the lower classes leave for critical follows what critical
// uses once its answers settle, not what it reserved at arrival: counted
// at the reservations the backlog grew without end and the room stood at
// its cap (250 tokens here) for as long as critical came: refill a batch
// could not use and critical never needed.
func TestSteadyUrgentTrafficKeepsNoRoom(t *testing.T) {
	t.Parallel()
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{OTPM: 6000}, BurstSeconds: 10, OutputTokens: mock.OutputRange{Min: 10, Max: 10}},
		upcfg.Config{Limits: upcfg.Limits{OutputTokensPerMinute: 6000}, BurstSeconds: 10})
	var groups []arrivalGroup
	for i := range 90 {
		groups = append(groups, arrivalGroup{at: time.Duration(i) * 2 * time.Second / 3, class: llm.Critical, n: 1})
	}
	var worst, depth float64 // the most normal leaves for critical, 10 s in and later
	res := p.replay(t, groups, func(now time.Time) {
		if now.Sub(t0) >= 10*time.Second {
			sn := p.d.Snapshot()
			worst, depth = max(worst, sn.Room[llm.Normal][flow.OutputTokens]), sn.Buckets[flow.OutputTokens].Depth
		}
	})
	require.Zero(t, status429(p.mock.Stats()), "no provider 429")
	for _, g := range res {
		for _, r := range g {
			require.NoError(t, r.err)
			require.Zero(t, r.resp.QueueWait, "critical alone is admitted at once")
		}
	}
	t.Logf("room normal leaves for critical: at most %.0f output tokens of a %.0f-token bucket", worst, depth)
	require.Greater(t, depth, 900.0)
	require.LessOrEqual(t, worst, 0.15*depth, "steady critical traffic far below the refill keeps no room near the cap (250 tokens here when counted at the reservations)")
}
