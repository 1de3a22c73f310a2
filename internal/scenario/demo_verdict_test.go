package scenario

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/llm"
)

func statsWith(ok, all int, elapsed time.Duration, p95 [llm.NumPriorities]time.Duration) runStats {
	rs := runStats{ok: ok, all: all, elapsed: elapsed}
	for c := range rs.perClass {
		rs.perClass[c] = classStats{count: 10, ok: 10, latency: Summary{Count: 10, P95: p95[c]}}
	}
	return rs
}

// TestDemoVerdict: the verdict comes from the figures, and says whether
// the lower classes paid for the urgent ones' latency.
func TestDemoVerdict(t *testing.T) {
	t.Parallel()
	naive := statsWith(1400, 1500, 40*time.Second, [llm.NumPriorities]time.Duration{900 * time.Millisecond, 950 * time.Millisecond, time.Second, time.Second})
	tests := []struct {
		name  string
		sl    runStats
		wants []string
	}{
		{"lower classes held back",
			statsWith(1500, 1500, 35*time.Second, [llm.NumPriorities]time.Duration{150 * time.Millisecond, 200 * time.Millisecond, 3 * time.Second, 9 * time.Second}),
			[]string{"Sluice served 1500 of 1500 requests and the provider refused 0", "naive client served 1400 of 1500, with 812 provider 429s and 2000 retries",
				"Critical p95: 150ms through Sluice, 900ms naive. High p95: 200ms and 950ms. Wall time: 35.0s and 40.0s.",
				"The lower classes paid for it: normal p95 3000ms and low p95 9000ms through Sluice, against 1000ms and 1000ms naive", "all-classes row"}},
		{"urgent classes slower",
			statsWith(1500, 1500, 35*time.Second, [llm.NumPriorities]time.Duration{2 * time.Second, 200 * time.Millisecond, 3 * time.Second, 9 * time.Second}),
			[]string{"Critical or high was slower through Sluice than with the naive client in this run", "breaker's opens"}},
		{"nobody paid",
			statsWith(1500, 1500, 35*time.Second, [llm.NumPriorities]time.Duration{150 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond}),
			[]string{"The lower classes did not pay for it: normal p95 500ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := strings.Join(demoVerdict(tt.sl, naive, 0, 812, 2000), "\n")
			for _, w := range tt.wants {
				require.Contains(t, got, w)
			}
		})
	}
	none := naive
	none.perClass[llm.Critical] = classStats{count: 3}
	require.Contains(t, strings.Join(demoVerdict(naive, none, 0, 0, 0), "\n"), "Critical p95: 900ms through Sluice, none served naive")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDemoProgress: while the sides run, a line every interval says how
// many requests each has answered; none after stop.
func TestDemoProgress(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(0, 0))
	var out lockedBuffer
	a, b := &answerCount{name: "sluice"}, &answerCount{name: "naive"}
	stop := reportProgress(t.Context(), Options{Clock: clk, Progress: &out}, 100, 5*time.Second, a, b)
	require.True(t, clk.WaitForTimers(1, 10*time.Second))
	a.n.Store(40)
	b.n.Store(55)
	clk.Advance(5 * time.Second)
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), "demo: 5s: sluice 40/100 answered, naive 55/100 answered")
	},
		10*time.Second, time.Millisecond)
	stop()
	clk.Advance(time.Minute)
	require.Equal(t, 1, strings.Count(out.String(), "demo:"))
}
