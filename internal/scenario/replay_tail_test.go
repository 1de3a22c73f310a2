package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
)

// TestHeavyTailTable: a class's heavy tail is what exceeds 4x its median
// input; each run's p95 of it and of the rest stands beside the unloaded
// run's, and a class the unloaded run lacks (the batch) gets its
// threshold from the other runs and no ratio.
func TestHeavyTailTable(t *testing.T) {
	t.Parallel()
	out := func(c llm.Priority, in int, lat time.Duration, ok bool) Outcome {
		o := Outcome{Item: Item{Priority: c, InputTokens: in}, Start: time.Second, End: time.Second + lat, Status: 200}
		if !ok {
			o.Status = 429
		}
		return o
	}
	// Critical: median 100, so 401 and more is heavy.
	unloaded := []Outcome{out(llm.Critical, 100, 10*time.Millisecond, true), out(llm.Critical, 100, 20*time.Millisecond, true),
		out(llm.Critical, 400, 30*time.Millisecond, true), out(llm.Critical, 90, 10*time.Millisecond, true), out(llm.Critical, 5000, 100*time.Millisecond, true)}
	loaded := []Outcome{out(llm.Critical, 100, 20*time.Millisecond, true), out(llm.Critical, 100, 40*time.Millisecond, true),
		out(llm.Critical, 400, 60*time.Millisecond, true), out(llm.Critical, 90, 20*time.Millisecond, true), out(llm.Critical, 5000, 300*time.Millisecond, true),
		out(llm.Low, 1000, time.Second, true), out(llm.Low, 1000, time.Second, true), out(llm.Low, 9000, 2*time.Second, false)}
	r := &Result{}
	var p replayPlan
	tab := p.heavyTail(r, []replayRun{{key: "unloaded", label: "unloaded", outs: unloaded}, {key: "sluice", label: "sluice", outs: loaded}})
	require.Equal(t, [][]string{
		{"unloaded", "critical", "400", "1 (1 served)", "100ms", "-", "30.0ms", "-"},
		{"sluice", "critical", "400", "1 (1 served)", "300ms", "3.00x", "60.0ms", "2.00x"},
		{"sluice", "low", "4,000", "1 (0 served)", "-", "-", "1000ms", "-"},
	}, tab.Rows)
	require.InDelta(t, 3.0, r.Figures["sluice_critical_heavy_p95_ratio"], 1e-9)
	require.InDelta(t, 2.0, r.Figures["sluice_critical_rest_p95_ratio"], 1e-9)
	require.InDelta(t, 100.0, r.Figures["unloaded_critical_heavy_p95_ms"], 1e-9)
	require.NotContains(t, r.Figures, "sluice_low_heavy_p95_ms", "no heavy low request was served")
}
