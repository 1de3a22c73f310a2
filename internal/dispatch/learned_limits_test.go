package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestFreshUpstreamWaitsForTheFirstHeaders: an upstream with no limits
// configured learns them from the provider's rate-limit headers, so until
// the first answer it knows nothing. It sends one request, not a wave of
// max_concurrency: a batch larger than the provider's burst then gets no
// 429 at all (before, every request of the first wave beyond the burst
// did), and the drain still spends the provider's burst and refill.
func TestFreshUpstreamWaitsForTheFirstHeaders(t *testing.T) {
	t.Parallel()
	const n, burst = 20, 5 // RPM 60 with a 5 s bucket: 5 at once, then 1/s
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 60}, BurstSeconds: burst, TTFT: time.Second},
		upcfg.Config{APIKey: "sk-fresh", Limits: upcfg.Limits{MaxConcurrency: 16}, JitterAllowance: upcfg.JitterAllowanceDefault, BurstRoom: -1})
	took, res := p.drainSlow(t, n)
	for _, r := range res {
		require.NoError(t, r.err)
		require.Equal(t, 200, r.resp.StatusCode)
	}
	st := p.mock.Stats()
	t.Logf("drain %v, mock answers %v", took, st.Overall.ByStatus)
	require.Zero(t, status429(st), "no request may outrun the provider's burst before its headers are known")
	require.EqualValues(t, n, st.Overall.ByStatus["200"])
	// The ideal: (n - burst) requests at 1/s after the burst, plus the
	// last answer's TTFT; the first answer costs one TTFT more, and the
	// 0.995 margin and the jitter allowance a little (17.1 s measured).
	ideal := time.Duration(n-burst)*time.Second + time.Second
	require.LessOrEqual(t, took, ideal+time.Second+500*time.Millisecond)
}

// TestFirstAnswerWaitIsBounded: a first answer slower than
// FirstAnswerWait (a long non-streamed reply, whose headers come with its
// end) holds the others back for FirstAnswerWait only, not until it ends.
func TestFirstAnswerWaitIsBounded(t *testing.T) {
	t.Parallel()
	const n, slots, ttft = 20, 16, 5 * time.Second
	p := newPoolRig(t, mock.Config{Limits: mock.Limits{RPM: 6000}, TTFT: ttft},
		upcfg.Config{APIKey: "sk-slow", Limits: upcfg.Limits{MaxConcurrency: slots}, JitterAllowance: upcfg.JitterAllowanceDefault})
	took, res := p.drainSlow(t, n)
	for _, r := range res {
		require.NoError(t, r.err)
		require.Equal(t, 200, r.resp.StatusCode)
	}
	st := p.mock.Stats()
	require.Zero(t, status429(st))
	require.Greater(t, st.Overall.PeakInFlight, int64(1), "others in flight before the first answer")
	// The first at 0 (ends at 5 s), fifteen more at FirstAnswerWait (end at
	// 7 s), one at 5 s (ends at 10 s) and the last three at 7 s: 12 s.
	// Waiting for the first answer would take 15 s.
	require.LessOrEqual(t, took, dispatch.FirstAnswerWait+ttft+ttft+time.Second)
}

// drainSlow is poolRig.drain for a provider that answers after a delay on
// the fake clock (TTFT): the system is quiet when the admission loop is
// idle and every request in flight sleeps in the mock (a timer each,
// besides the loop's own and each queued caller's deadline: counting those
// as the requests' let the clock jump to the loop's wake-up before the
// mock had armed the first request's TTFT, and the run took 15 s instead
// of 12, or sent the first wave blind, 9-11 provider 429s, about 1 run in
// 20 under four CPU hogs); the clock then moves to the next timer.
func (p *poolRig) drainSlow(t *testing.T, n int) (time.Duration, []result) {
	t.Helper()
	var done atomic.Int32
	chans := p.submit(n, &done)
	quiet := func() bool {
		if int(done.Load()) == n {
			return true
		}
		s := p.d.Snapshot()
		q := queued(s)
		// Every request in flight admitted by the mock (so its caller is
		// past await, whose deadline timer it stopped) and asleep there:
		// one timer each, one per queued caller (its deadline), and the
		// loop's.
		return int(done.Load())+q+s.InFlight == n && dispatch.LoopIdle(p.d) &&
			p.mock.Stats().Overall.InFlight == int64(s.InFlight) &&
			p.fc.Timers() >= q+s.InFlight+dispatch.LoopTimers(p.d)
	}
	for int(done.Load()) < n {
		waitQuiet(t, 60*time.Second, quiet)
		if int(done.Load()) == n {
			break
		}
		next, ok := p.fc.Next()
		require.True(t, ok, "nothing to wait for with %d of %d done", done.Load(), n)
		p.fc.Set(next)
	}
	return p.fc.Now().Sub(t0), collect(chans)
}
