package cluster_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestLearnedLimitSharedAcrossNodes: an upstream configured with no
// limits, on two nodes (real dispatchers on one fake clock, sharing a
// Memory backend). Only node a's answers carry the provider's rate-limit
// headers (600 RPM, the remaining of a provider bucket 600 deep); node
// b, which has never had an answer, adopts the limit within one sync of
// a's, and when both are then flooded with more than the bucket holds,
// the pair's combined sending stays within the learned quota: the
// provider's bucket never runs dry (no 429), and over every window the
// pair sends at most the rate times the window plus the bucket's depth.
// Without the sharing b would send its whole flood at once.
func TestLearnedLimitSharedAcrossNodes(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	const rpm = 600
	rate := float64(rpm) / 60
	var mu sync.Mutex
	var sends []time.Time // every request either node sent, on the fake clock
	overdrafts := 0       // requests the provider's bucket had no room for (429s)
	bucket, bucketAt := float64(rpm), fc.Now()
	handler := func(node int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			now := fc.Now()
			mu.Lock()
			sends = append(sends, now)
			// The provider's own bucket: rpm deep, refilled at rpm/60.
			bucket = min(rpm, bucket+rate*now.Sub(bucketAt).Seconds()) - 1
			bucketAt = now
			if bucket < 0 {
				overdrafts++
			}
			remaining := max(int(bucket), 0)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			if node == 0 {
				w.Header().Set("anthropic-ratelimit-requests-limit", strconv.Itoa(rpm))
				w.Header().Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(remaining))
				w.Header().Set("anthropic-ratelimit-requests-reset", now.Add(time.Second).UTC().Format(time.RFC3339))
			}
			_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}`)
		}
	}
	var urls []string
	for i := range 2 {
		s := httptest.NewServer(handler(i))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	backend := cluster.NewMemory(fc)
	ds := startClusterNodes(t, fc, backend, urls, func(c *dispatch.Config) {
		c.Limits = upcfg.Limits{} // none configured
	})
	runClock(t, fc)
	capacity := func(d *dispatch.Dispatcher) float64 { return d.ClusterLoad().Capacity[flow.Requests] }
	require.Zero(t, capacity(ds[0]))
	require.Zero(t, capacity(ds[1]))

	// a's first answer teaches it the limit; b adopts it within one sync
	// (a publishes it at once, the store announces it).
	deadline := fc.Now().Add(10 * time.Minute)
	require.NoError(t, do(ds[0], clusterRequest(deadline, llm.Normal)))
	learned := fc.Now()
	require.Greater(t, capacity(ds[0]), 0.0)
	require.Eventually(t, func() bool { return capacity(ds[1]) > 0 }, 10*time.Second, time.Millisecond)
	took := fc.Now().Sub(learned)
	t.Logf("b adopted the limit %v (fake) after a learned it", took)
	require.LessOrEqual(t, took, 100*time.Millisecond+cluster.PausePollDefault+20*time.Millisecond, "within one sync interval")
	mu.Lock()
	require.Len(t, sends, 1, "b adopted it without sending anything")
	mu.Unlock()
	require.InDelta(t, capacity(ds[0]), capacity(ds[1]), 1e-9, "the same quota on both nodes")
	require.LessOrEqual(t, capacity(ds[1]), float64(rpm))

	// Both nodes flooded at once.
	const perNode = 400
	var wg sync.WaitGroup
	errs := make(chan error, 2*perNode)
	for _, d := range ds {
		for range perNode {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- do(d, clusterRequest(deadline, llm.Normal)) }()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sends, 1+2*perNode)
	slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
	require.Zero(t, overdrafts, "the provider's bucket never ran dry")
	const depth = rpm // the provider's bucket, which a's answers deepen the view to
	worst := 0.0
	for _, win := range []time.Duration{0, 500 * time.Millisecond, 2 * time.Second, 10 * time.Second} {
		a := 0
		for b := range sends {
			for sends[b].Sub(sends[a]) > win {
				a++
			}
			n := float64(b - a + 1)
			bound := rate*win.Seconds() + depth
			worst = max(worst, n/bound)
			require.LessOrEqual(t, n, bound, "window %v ending at %v: %v sends", win, sends[b].Sub(sends[0]), n)
		}
	}
	// Past the first burst the pair sends at the learned rate (b's bucket
	// is its share of the configured burst: only a's answers showed the
	// provider's depth).
	from := sends[0].Add(10 * time.Second)
	i := slices.IndexFunc(sends, func(s time.Time) bool { return !s.Before(from) })
	steady := float64(len(sends)-i) / sends[len(sends)-1].Sub(from).Seconds()
	t.Logf("%d requests over %v; steady %.2f/s of the learned %.2f/s; worst window at %.3f of its bound",
		len(sends), sends[len(sends)-1].Sub(sends[0]), steady, rate, worst)
	require.Greater(t, steady, 0.9*rate, "the pair uses the learned quota")
}

// TestReportedRemainingLowersOtherNodes: the provider's bucket is drained
// by a caller outside the cluster; node a's answer reports it (remaining
// 0) and node b, which had no answer, lowers its view within one sync to
// its share of that remaining plus the refill since: it does not spend
// the tokens its own buckets still believed in.
func TestReportedRemainingLowersOtherNodes(t *testing.T) {
	t.Parallel()
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	const rpm = 600
	handler := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("anthropic-ratelimit-requests-limit", strconv.Itoa(rpm))
		w.Header().Set("anthropic-ratelimit-requests-remaining", "0")
		w.Header().Set("anthropic-ratelimit-requests-reset", fc.Now().Add(6*time.Second).UTC().Format(time.RFC3339))
		_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}`)
	}
	s := httptest.NewServer(http.HandlerFunc(handler))
	t.Cleanup(s.Close)
	ds := startClusterNodes(t, fc, cluster.NewMemory(fc), []string{s.URL, s.URL}, func(c *dispatch.Config) {
		c.Limits = upcfg.Limits{RequestsPerMinute: rpm}
	})
	runClock(t, fc) // after b's view is read
	level := func(d *dispatch.Dispatcher) float64 { return d.Snapshot().Buckets[flow.Requests].Level }
	// Both nodes hold about half the quota's 5 s depth.
	require.Eventually(t, func() bool { return level(ds[1]) > 20 }, 10*time.Second, time.Millisecond)
	before := level(ds[1])

	// The report counts from when a's request was sent, and the clock runs
	// on while the request is on its way, however long a loaded machine
	// keeps it there: b's refill is bounded from the send.
	sent := fc.Now()
	require.NoError(t, do(ds[0], clusterRequest(fc.Now().Add(time.Minute), llm.Normal)))
	answered := fc.Now()
	// a's request also moves the demand-weighted shares: b's share may
	// drop towards flow.MinShare, which cuts its level to its new depth
	// before the report arrives. Only the report takes it below half of
	// that depth.
	var lowered float64
	require.Eventually(t, func() bool {
		st := ds[1].Snapshot().Buckets[flow.Requests]
		lowered = st.Level
		return lowered < min(before, st.Depth)/2
	}, 10*time.Second, time.Millisecond, "b lowers its view")
	took := fc.Now().Sub(answered)
	// b's share is at most 1/2: its refill is at most 5/s.
	require.LessOrEqual(t, lowered, 5*fc.Now().Sub(sent).Seconds()+0.5, "b keeps its share of 0 plus its refill since a's request was sent")
	require.LessOrEqual(t, took, 2*100*time.Millisecond+cluster.PausePollDefault+20*time.Millisecond, "within a's sync and b's")
	t.Logf("b's level %.2f → %.2f in %v (fake) after a's answer reported 0 remaining", before, lowered, took)
}
