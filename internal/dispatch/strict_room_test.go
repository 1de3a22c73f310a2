package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// strictRoomRig is ITPM 60,000 (995 tokens/s after the margin) with a
// 10 s bucket on both sides: the batch class keeps half of it, about
// 4,900 tokens, for the urgent classes' bursts (primed, then learned), so
// a 7,000-token low request is too big to leave that room.
func strictRoomRig(t *testing.T, loose bool) *poolRig {
	t.Helper()
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 10_000, ITPM: 60_000}, BurstSeconds: 10},
		upcfg.Config{Limits: upcfg.Limits{RequestsPerMinute: 10_000, InputTokensPerMinute: 60_000}, BurstSeconds: 10,
			JitterAllowance: upcfg.JitterAllowanceDefault})
	if loose {
		dispatch.LooseRoom(p.d)
	}
	return p
}

// sent is when each request of res, which arrived at at, was admitted.
func sent(t *testing.T, at time.Duration, res []result) (first, last time.Duration) {
	t.Helper()
	first = time.Duration(1 << 62)
	for _, r := range res {
		require.NoError(t, r.err)
		require.Equal(t, 200, r.resp.StatusCode)
		first, last = min(first, at+r.resp.QueueWait), max(last, at+r.resp.QueueWait)
	}
	return first, last
}

// TestLargeLowRequestLeavesTheUrgentRoom: a low request too big to leave
// the room kept for the urgent classes is not admitted into it while a
// more urgent class is active, so the critical burst that follows finds
// the room at once; the low request goes at a full bucket once critical
// has gone quiet. Before the rule it took the room at once and the burst
// waited for refill.
func TestLargeLowRequestLeavesTheUrgentRoom(t *testing.T) {
	t.Parallel()
	groups := []arrivalGroup{
		{at: 0, class: llm.Critical, n: 1, client: "app", tokens: 1_000},
		{at: time.Second, class: llm.Critical, n: 1, client: "app", tokens: 1_000},
		{at: 1500 * time.Millisecond, class: llm.Low, n: 1, client: "batch", tokens: 7_000},
		{at: 3 * time.Second, class: llm.Critical, n: 5, client: "app", tokens: 1_000},
	}
	run := func(loose bool) (lowSent, burstLast time.Duration) {
		p := strictRoomRig(t, loose)
		res := p.replay(t, groups, nil)
		require.Zero(t, status429(p.mock.Stats()), "no provider 429")
		lowSent, _ = sent(t, groups[2].at, res[2])
		_, burstLast = sent(t, groups[3].at, res[3])
		return lowSent, burstLast
	}
	lowSent, burstLast := run(false)
	oldLow, oldBurst := run(true)
	t.Logf("with the rule: low admitted at %v, the burst's last at %v; before: low at %v, the burst's last at %v", lowSent, burstLast, oldLow, oldBurst)
	require.Less(t, oldLow, groups[3].at, "before, the low request took the room at once")
	require.Greater(t, oldBurst, groups[3].at, "and the burst waited for refill")
	require.Equal(t, groups[3].at, burstLast, "the burst finds the room at once")
	require.Greater(t, lowSent, groups[3].at, "the low request waited for critical to go quiet")
	require.Less(t, lowSent, 20*time.Second, "then went at a full bucket")
}

// TestLargeLowRequestGoesAtHalfItsDeadline: critical never goes quiet;
// the low request too big to leave its room takes it once it has waited
// half the time its deadline gave it, so it is served in time.
func TestLargeLowRequestGoesAtHalfItsDeadline(t *testing.T) {
	t.Parallel()
	var groups []arrivalGroup
	for at := time.Duration(0); at < time.Minute; at += time.Second {
		groups = append(groups, arrivalGroup{at: at, class: llm.Critical, n: 1, client: "app", tokens: 300})
	}
	// In arrival order: after the critical requests at 0 and 1 s.
	low := arrivalGroup{at: 1500 * time.Millisecond, class: llm.Low, n: 1, client: "batch", tokens: 7_000, deadline: 20 * time.Second}
	groups = append(groups[:2], append([]arrivalGroup{low}, groups[2:]...)...)
	p := strictRoomRig(t, false)
	res := p.replay(t, groups, nil)
	require.Zero(t, status429(p.mock.Stats()), "no provider 429")
	lowSent, _ := sent(t, low.at, res[2])
	t.Logf("low admitted at %v (half its deadline at %v)", lowSent, low.at+low.deadline/2)
	require.GreaterOrEqual(t, lowSent, low.at+low.deadline/2, "it left the room while critical was active")
	require.Less(t, lowSent, low.at+low.deadline/2+time.Second, "and took it at half its deadline")
}
