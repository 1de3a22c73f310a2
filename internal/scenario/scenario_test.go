package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScenariosSmoke runs every scenario and the demo at their Quick sizes
// and checks that each produced a complete report. Targets are not
// asserted: these are tiny, timing-dependent runs.
func TestScenariosSmoke(t *testing.T) {
	t.Parallel()
	type run struct {
		name    string
		run     func(context.Context, Options) (*Result, error)
		figures []string
	}
	runs := []run{{name: "demo", run: Demo, figures: []string{"sluice_ok", "naive_ok", "sluice_cost_usd"}}}
	wantFigures := map[string][]string{
		"goodput":  {"ideal_drain_s", "sluice_drain_s", "naive_drain_s", "sluice_provider_429"},
		"priority": {"unloaded_critical_p95_ms", "sluice_critical_p95_ms", "served_per_s_low"},
		"outage":   {"sluice_failures_eligible", "sluice_recovery_s"},
		"overhead": {"sluice_added_p99_ms_200", "bare_added_p99_ms_200", "direct_p99_ms_200", "sluice_added_cpu_s_per_1k_200"},
		"mock":     {"requests_per_s"},
		"trace": {"unloaded_critical_p95_ms", "sluice_critical_p95_ms", "oracle_room_critical_p95_ms", "oracle_strict_high_p95_ms",
			"sluice_batch_drain_s", "oracle_room_batch_drain_s", "sluice_provider_429", "sluice_input_utilisation",
			"unloaded_critical_rest_p95_ms", "sluice_critical_rest_p95_ratio"},
	}
	for _, s := range Scenarios() {
		if s.Name == "batch-route" {
			continue // it needs the process to itself: TestBatchRouteScenario
		}
		runs = append(runs, run{name: s.Name, run: s.Run, figures: wantFigures[s.Name]})
	}
	require.Len(t, runs, 7)
	for _, tc := range runs {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := tc.run(t.Context(), Options{Quick: true, Seed: 7})
			require.NoError(t, err)
			require.Equal(t, tc.name, r.Name)
			require.NotEmpty(t, r.Setup)
			require.NotEmpty(t, r.Tables)
			require.Positive(t, r.Elapsed)
			for _, f := range tc.figures {
				require.Contains(t, r.Figures, f)
			}
			if tc.name != "mock" && tc.name != "demo" {
				require.NotEmpty(t, r.Checks, "every scenario but mock and demo states its targets")
			}
			if sl, ok := r.Figures["sluice_ok"]; ok {
				require.Positive(t, sl, "the demo's Sluice run succeeded at something")
			}
			var text bytes.Buffer
			require.NoError(t, r.WriteText(&text))
			require.Contains(t, text.String(), "== "+tc.name)
			var js bytes.Buffer
			require.NoError(t, WriteJSON(&js, []*Result{r}))
			var back []Result
			require.NoError(t, json.Unmarshal(js.Bytes(), &back))
			require.Equal(t, r.Figures, back[0].Figures)
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	for _, s := range Scenarios() {
		got, err := Lookup(s.Name)
		require.NoError(t, err)
		require.Equal(t, s.Name, got.Name)
	}
	_, err := Lookup("nosuch")
	require.True(t, errors.Is(err, ErrUnknownScenario))
	require.ErrorContains(t, err, "goodput, priority, outage, overhead, mock, batch-route, trace, all")
}

func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	s, err := Lookup("mock")
	require.NoError(t, err)
	_, err = s.Run(t.Context(), Options{Requests: -1})
	require.ErrorContains(t, err, "Requests")
	_, err = Demo(t.Context(), Options{Duration: -1})
	require.ErrorContains(t, err, "Duration")
	for _, o := range []Options{{GoodputPreset: "nosuch"}, {OutputReservation: "some"}, {OTPMMode: "lazy"}} {
		_, err = s.Run(t.Context(), o)
		require.ErrorContains(t, err, "must be")
	}
}

// TestGoodputVariants: the goodput flags reach the gateway and the mock
// (limits learned, the learned output reservation against a mock that
// counts output as produced), and the learned-limits target is 0.95.
func TestGoodputVariants(t *testing.T) {
	t.Parallel()
	s, err := Lookup("goodput")
	require.NoError(t, err)
	r, err := s.Run(t.Context(), Options{Quick: true, Seed: 7, LearnLimits: true, OutputReservation: "learned"})
	require.NoError(t, err)
	var text bytes.Buffer
	require.NoError(t, r.WriteText(&text))
	for _, want := range []string{"no limits configured", "output_reservation: learned", "(realtime)", "drain at >= 0.95", "ideal / drain"} {
		require.Contains(t, text.String(), want)
	}
	require.Contains(t, r.Figures, "sluice_ratio")
	require.Equal(t, GoodputPresetIssue11, goodputPresetNames()[0])
	p := goodputSetup(Options{GoodputPreset: GoodputPresetIssue11})
	require.Equal(t, 600, p.workload.Requests)
	require.InDelta(t, 100, p.workload.InputTokensStdDev, 0)
	require.InDelta(t, 150, p.output.Mean, 0)
}

func TestResultText(t *testing.T) {
	t.Parallel()
	r := &Result{Name: "x", Setup: []string{"setup line"},
		Tables: []Table{{Title: "T", Header: []string{"", "a"}, Rows: [][]string{{"row", "1"}}}},
		Notes:  []string{"a note"}}
	r.check("fast", "<= 1ms", "2ms", false)
	r.check("ok", "0", "0", true)
	require.False(t, r.Met())
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	r.Verdict = []string{"verdict line"}
	b.Reset()
	require.NoError(t, r.WriteText(&b))
	require.Less(t, strings.Index(b.String(), "verdict line"), strings.Index(b.String(), "setup line"), "the verdict comes first")
	for _, want := range []string{"== x", "setup line", "row", "MISSED  fast", "MET     ok", "note: a note"} {
		require.Contains(t, b.String(), want)
	}
}
