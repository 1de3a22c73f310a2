package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// heavyTail is what one run of TestHeavyTailNeitherBlocksNorStarves saw.
type heavyTail struct {
	bigWait time.Duration // the big request's queue wait
	// smallWorst is the longest queue wait of the small requests that
	// arrived while the big one waited; passed is how many of them were
	// admitted before it.
	smallWorst time.Duration
	passed     int
}

// runHeavyTail replays, at ITPM 30,000 (497.5 tokens/s after the margin,
// a minute deep on both sides), a request of 27,000 tokens at t0 that
// empties the bucket, one of 14,000 tokens a second later, and from then
// small ones of 400 tokens every gap for span, all of one class from
// three clients, through the real dispatcher and the mock on the fake
// clock (with going past a waiting head, or without: the old rule).
func runHeavyTail(t *testing.T, gap, span time.Duration, bypass bool) heavyTail {
	t.Helper()
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 10_000, ITPM: 30_000}},
		upcfg.Config{Limits: upcfg.Limits{RequestsPerMinute: 10_000, InputTokensPerMinute: 30_000}, BurstSeconds: 60,
			JitterAllowance: upcfg.JitterAllowanceDefault})
	if !bypass {
		dispatch.NoBypass(p.d)
	}
	const bigAt = time.Second
	groups := []arrivalGroup{
		{at: 0, class: llm.Normal, n: 1, client: "filler", tokens: 27_000},
		{at: bigAt, class: llm.Normal, n: 1, client: "big", tokens: 14_000},
	}
	for at := bigAt + gap; at <= bigAt+span; at += gap {
		groups = append(groups, arrivalGroup{at: at, class: llm.Normal, n: 1, client: "small", tokens: 400})
	}
	res := p.replay(t, groups, nil)
	require.Zero(t, status429(p.mock.Stats()), "no provider 429")
	for _, g := range res {
		for _, r := range g {
			require.NoError(t, r.err)
			require.Equal(t, 200, r.resp.StatusCode)
		}
	}
	var h heavyTail
	h.bigWait = res[1][0].resp.QueueWait
	bigSent := bigAt + h.bigWait
	for i, g := range groups[2:] {
		if g.at >= bigSent {
			break
		}
		w := res[2+i][0].resp.QueueWait
		h.smallWorst = max(h.smallWorst, w)
		if g.at+w < bigSent {
			h.passed++
		}
	}
	return h
}

// TestHeavyTailNeitherBlocksNorStarves: a request many times the median
// input waits for its bucket to refill while small requests of its class
// keep coming. The small ones go past it, taking at most half of the
// refill since it began waiting (flow.BypassShare), so they are admitted
// at once while the big one waits at most twice as long as alone; under
// a stream of small ones faster than the refill it is still admitted
// within that bound, not starved. Without the rule (the head is never
// passed) every small one waits behind it.
func TestHeavyTailNeitherBlocksNorStarves(t *testing.T) {
	t.Parallel()
	bound := func(solo time.Duration) time.Duration {
		return time.Duration(float64(solo)/(1-flow.BypassShare)) + time.Second
	}
	t.Run("small ones within the bypass share", func(t *testing.T) {
		t.Parallel()
		// 160 input tokens/s of small requests, 200 tokens/s with their
		// max_tokens in the combined bucket the mock reports (and the
		// engine learns): less than half of either refill.
		old := runHeavyTail(t, 2500*time.Millisecond, 90*time.Second, false)
		now := runHeavyTail(t, 2500*time.Millisecond, 90*time.Second, true)
		t.Logf("without the rule: big waited %v, small ones arriving meanwhile up to %v, %d admitted before it", old.bigWait, old.smallWorst, old.passed)
		t.Logf("with it: big waited %v (bound %v), small ones up to %v, %d admitted before it", now.bigWait, bound(old.bigWait), now.smallWorst, now.passed)
		require.Zero(t, old.passed, "the old rule never passes the head")
		require.Greater(t, old.smallWorst, 15*time.Second, "and the small ones wait behind it")
		require.Less(t, now.smallWorst, time.Second, "the small ones are admitted while it waits")
		require.Positive(t, now.passed)
		require.Greater(t, now.bigWait, old.bigWait, "they took part of the refill")
		require.LessOrEqual(t, now.bigWait, bound(old.bigWait), "at most twice its solo wait")
	})
	t.Run("small ones faster than the refill", func(t *testing.T) {
		t.Parallel()
		// 800 input tokens/s: the small ones alone would take every token.
		old := runHeavyTail(t, 500*time.Millisecond, 90*time.Second, false)
		now := runHeavyTail(t, 500*time.Millisecond, 90*time.Second, true)
		t.Logf("without the rule: big waited %v, %d small admitted before it", old.bigWait, old.passed)
		t.Logf("with it: big waited %v (bound %v), %d small admitted before it", now.bigWait, bound(old.bigWait), now.passed)
		require.Zero(t, old.passed)
		require.Positive(t, now.passed, "small ones go past it")
		require.LessOrEqual(t, now.bigWait, bound(old.bigWait), "not starved: within twice its solo wait")
	})
}
