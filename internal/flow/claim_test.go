package flow_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestClaimBoundsTheHeadsDelay: a head waits for an empty bucket to
// refill while small requests, as many as can go, are admitted past it
// (Keep.Past). Whatever their sizes and pace, they reserve at most
// BypassShare of the refill since it began waiting, and the head is
// admitted within 1/(1−BypassShare) of its wait alone. Without the claim
// (the small ones taking whatever fits) the head is starved.
func TestClaimBoundsTheHeadsDelay(t *testing.T) {
	t.Parallel()
	const step = 10 * time.Millisecond
	for seed := range uint64(40) {
		rnd := rand.New(rand.NewPCG(seed, 7))
		// 1,000 tokens a second, a minute deep.
		l := newLimiter(t, [flow.NumDims]float64{flow.Requests: 6000, flow.InputTokens: 60_000}, 60)
		now := t0
		_, err := l.Reserve(flow.Amount{flow.Requests: 1, flow.InputTokens: 60_000}, now)
		require.NoError(t, err)
		head := flow.Amount{flow.Requests: 1, flow.InputTokens: float64(2_000 + rnd.IntN(40_000))}
		solo := time.Duration(head[flow.InputTokens] / 1000 * float64(time.Second))
		small := func() flow.Amount {
			return flow.Amount{flow.Requests: 1, flow.InputTokens: float64(50 + rnd.IntN(950))}
		}
		next := small()
		var passed float64
		for {
			require.Less(t, now.Sub(t0), 3*solo, "seed %d: the head is starved", seed)
			if w, err := l.Reserve(head, now); err == nil && w == 0 {
				break
			}
			l.Claim("head", head, flow.Keep{}, now)
			for {
				w, err := l.ReserveKeeping(next, flow.Keep{Past: true}, now)
				require.NoError(t, err)
				if w > 0 {
					break
				}
				passed += next[flow.InputTokens]
				next = small()
			}
			require.LessOrEqual(t, passed, flow.BypassShare*1000*now.Sub(t0).Seconds()+1e-6, "seed %d", seed)
			now = now.Add(step)
		}
		l.Unclaim()
		bound := time.Duration(float64(solo)/(1-flow.BypassShare)) + step
		require.LessOrEqual(t, now.Sub(t0), bound, "seed %d: head of %.0f admitted after %v (alone %v)", seed, head[flow.InputTokens], now.Sub(t0), solo)
		require.Greater(t, now.Sub(t0), solo, "seed %d: the small ones went past it", seed)
	}

	// Without the claim the small ones keep the bucket below the head.
	l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 60_000}, 60)
	now := t0
	_, err := l.Reserve(flow.Amount{flow.InputTokens: 60_000}, now)
	require.NoError(t, err)
	for range 1_000 { // 100 s; alone it would wait 5 s
		w, err := l.Reserve(flow.Amount{flow.InputTokens: 5_000}, now)
		require.NoError(t, err)
		require.Positive(t, w, "starved: never admitted")
		for {
			if w, _ := l.Reserve(flow.Amount{flow.InputTokens: 100}, now); w > 0 {
				break
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
}

// TestClaimAboveTheDepthIsTheHeads: a head bigger than the bucket's depth
// gathers room above it; a small reservation would cap the level at the
// depth again, so nothing goes past it from the moment the level is
// above the depth, and it is admitted when the refill reaches its cost.
func TestClaimAboveTheDepthIsTheHeads(t *testing.T) {
	t.Parallel()
	// 1,000 tokens a second, 5 s deep; the head needs 8 s of refill.
	l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 60_000}, 5)
	now := t0
	_, err := l.Reserve(flow.Amount{flow.InputTokens: 5_000}, now)
	require.NoError(t, err)
	head := flow.Amount{flow.InputTokens: 8_000}
	small := flow.Amount{flow.InputTokens: 100}
	l.Claim("head", head, flow.Keep{}, now)
	now = now.Add(2 * time.Second) // 2,000 in the bucket, 1,000 of it for small ones
	for range 10 {
		w, err := l.ReserveKeeping(small, flow.Keep{Past: true}, now)
		require.NoError(t, err)
		require.Zero(t, w)
	}
	w, err := l.ReserveKeeping(small, flow.Keep{Past: true}, now)
	require.NoError(t, err)
	require.Positive(t, w, "past its share")
	now = now.Add(5 * time.Second) // 6,000: above the depth
	w, err = l.ReserveKeeping(small, flow.Keep{Past: true}, now)
	require.NoError(t, err)
	require.Equal(t, flow.StrictRecheck, w, "above the depth only the head may go")
	w, err = l.TimeUntil(head, now.Add(1900*time.Millisecond))
	require.NoError(t, err)
	require.Positive(t, w)
	w, err = l.Reserve(head, now.Add(2*time.Second))
	require.NoError(t, err)
	require.Zero(t, w, "admitted at 9 s, 1 s later than alone: the small ones' share")
}

// TestStrictKeep: a cost too big to leave a keep goes at a full bucket,
// unless the keep is strict: it then does not fit (a recheck later), and
// as a head it claims nothing, so the requests behind it are not held.
func TestStrictKeep(t *testing.T) {
	t.Parallel()
	// 1,000 tokens a second, 10 s deep, full; a keep of half the depth.
	l := newLimiter(t, [flow.NumDims]float64{flow.InputTokens: 60_000}, 10)
	keep := flow.Keep{Seconds: [flow.NumDims]float64{flow.InputTokens: 5}, Cap: 0.5}
	big := flow.Amount{flow.InputTokens: 8_000}
	w, err := l.TimeUntil(big, t0)
	require.NoError(t, err)
	require.Zero(t, w)
	w, _, err = l.Room(big, keep, t0)
	require.NoError(t, err)
	require.Zero(t, w, "too big to leave the keep: a full bucket will do")
	keep.Strict = true
	w, _, err = l.Room(big, keep, t0)
	require.NoError(t, err)
	require.Equal(t, flow.StrictRecheck, w, "strict: it does not fit")
	w, err = l.ReserveKeeping(flow.Amount{flow.InputTokens: 4_000}, keep, t0)
	require.NoError(t, err)
	require.Zero(t, w, "a cost that leaves the keep fits")

	// As a waiting head it claims nothing: what leaves the keep goes past.
	l.Claim("big", big, keep, t0)
	w, err = l.ReserveKeeping(flow.Amount{flow.InputTokens: 1_000}, flow.Keep{Past: true}, t0)
	require.NoError(t, err)
	require.Zero(t, w)
	keep.Strict = false
	l.Claim("big", big, keep, t0)
	w, err = l.ReserveKeeping(flow.Amount{flow.InputTokens: 1_000}, flow.Keep{Past: true}, t0)
	require.NoError(t, err)
	require.Positive(t, w, "once it may go at a full bucket, it holds its claim")
}
