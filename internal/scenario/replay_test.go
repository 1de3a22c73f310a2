package scenario

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

func TestParseTraceSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want TraceSpec
		err  string
	}{
		{in: "azure-code", want: TraceSpec{Source: "azure-code"}},
		{in: "azure-code:critical", want: TraceSpec{Source: "azure-code", Class: "critical"}},
		{in: "azure-code:2", want: TraceSpec{Source: "azure-code", Class: "2"}},
		{in: "mooncake-conv:high:0.25", want: TraceSpec{Source: "mooncake-conv", Class: "high", TokenScale: 0.25}},
		{in: "mooncake-conv::0.25", want: TraceSpec{Source: "mooncake-conv", TokenScale: 0.25}},
		{in: "mooncake-conv:high:1", want: TraceSpec{Source: "mooncake-conv", Class: "high", TokenScale: 1}},
		{in: "/data/a:b/trace.csv", want: TraceSpec{Source: "/data/a:b/trace.csv"}},
		{in: "/data/a:b/trace.csv:low", want: TraceSpec{Source: "/data/a:b/trace.csv", Class: "low"}},
		{in: "azure-code:urgent", err: "want NAME_OR_FILE[:class[:token-scale]]"},
		{in: "azure-code:high:0", err: "token scale must be a number in (0, 1000]"},
		{in: "azure-code::NaN", err: "token scale"},
		{in: ":low", err: "name a built-in trace or a file"},
		{in: "", err: "name a built-in trace or a file"},
	}
	for _, tc := range tests {
		got, err := ParseTraceSpec(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for in, want := range map[string][2]any{"3000": {3000, ""}, "10:normal": {10, "normal"}, "0": {0, ""}} {
		n, class, err := ParseBatchSpec(in)
		require.NoError(t, err)
		require.Equal(t, want, [2]any{n, class})
	}
	for _, in := range []string{"x", "-1", "10:urgent", "2000000"} {
		_, _, err := ParseBatchSpec(in)
		require.Error(t, err, in)
	}
}

func FuzzParseTraceSpec(f *testing.F) {
	for _, s := range []string{"azure-code", "a:high", "a::0.5", "a:b:c:low:2", ":", "::", "a:high:1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseTraceSpec(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, spec.Source)
		require.True(t, spec.TokenScale == 0 || (spec.TokenScale > 0 && spec.TokenScale <= 1000))
		if spec.Class != "" {
			_, err := llm.ParsePriority(spec.Class)
			require.NoError(t, err)
		}
		require.NoError(t, ReplayOptions{Traces: []TraceSpec{spec}}.validate())
	})
}

// TestPlanReplay: the window, the classes, the speed-up and the token
// scaling reach the requests, and the batch's sizes are heavy-tailed around
// their mean.
func TestPlanReplay(t *testing.T) {
	t.Parallel()
	p, err := planReplay(Options{Seed: 3, Replay: ReplayOptions{
		Traces: []TraceSpec{{Source: "azure-code"}, {Source: "azure-conv", TokenScale: 0.5}, {Source: SyntheticBurstyName, Class: "low"}},
		From:   10 * time.Minute, Window: time.Minute, Speed: 2, TokenScale: 2, Batch: 2000, BatchClass: "normal", BurstSeconds: 10,
	}})
	require.NoError(t, err)
	require.Equal(t, mock.Limits{RPM: 8000, ITPM: 4_000_000, OTPM: 800_000}, p.limits)
	require.InDelta(t, 5, p.depthSeconds, 0)
	require.Equal(t, 100*time.Millisecond, p.ttft)
	require.Equal(t, time.Millisecond, p.perToken)
	require.Equal(t, time.Minute, p.timeout)
	require.Equal(t, 30*time.Second, p.window)
	require.Equal(t, 3, p.batchGroup)
	require.Len(t, p.services, 4)
	wantClass := []llm.Priority{llm.Critical, llm.High, llm.Low, llm.Normal}
	for g, svc := range p.services {
		require.Equal(t, wantClass[g], svc.class, svc.name)
		require.Positive(t, svc.requests, svc.name)
	}
	code, err := LoadTrace("azure-code")
	require.NoError(t, err)
	var want []TraceRecord
	for _, r := range code.Records {
		if r.At >= 10*time.Minute && r.At < 11*time.Minute {
			want = append(want, r)
		}
	}
	var got []Item
	var batchIn, n float64
	var ins []int
	for i, it := range p.items {
		require.Equal(t, i, it.Index)
		require.Equal(t, llm.Anthropic, it.Protocol)
		require.GreaterOrEqual(t, it.MaxTokens, max(ReplayMaxTokensMin, ReplayMaxTokensFactor*it.OutputTokens))
		switch it.Group {
		case 0:
			got = append(got, it)
		case p.batchGroup:
			require.Zero(t, it.At)
			require.Equal(t, llm.Normal, it.Priority)
			batchIn += float64(it.InputTokens)
			ins = append(ins, it.InputTokens)
			n++
		}
		if i > 0 && it.Group != p.batchGroup {
			require.GreaterOrEqual(t, it.At, p.items[i-1].At, "arrival order")
		}
	}
	require.Len(t, got, len(want))
	for i, it := range got {
		require.Equal(t, (want[i].At-10*time.Minute)/2, it.At)
		require.Equal(t, max(1, 2*want[i].InputTokens), it.InputTokens)
		require.Equal(t, max(1, 2*want[i].OutputTokens), it.OutputTokens)
		require.Equal(t, llm.Critical, it.Priority)
	}
	require.InDelta(t, ReplayBatchInputMeanDefault, batchIn/n, ReplayBatchInputMeanDefault*0.1, "batch mean input")
	mx := 0
	for _, v := range ins {
		mx = max(mx, v)
	}
	require.Greater(t, mx, 8*ReplayBatchInputMeanDefault, "a heavy tail")

	_, err = planReplay(Options{Replay: ReplayOptions{Traces: []TraceSpec{{Source: "azure-code"}}, From: 2 * time.Hour}})
	require.ErrorContains(t, err, "trace azure-code has no requests from 2h0m0s to 2h4m0s (it spans 0 to 58m33s)")
	_, err = planReplay(Options{Replay: ReplayOptions{Traces: []TraceSpec{{Source: "nosuch.csv"}}}})
	require.ErrorIs(t, err, ErrUnknownTrace)
}

// TestPlanReplayDefaults: no options is issue 22's case, and a trace's
// recorded class and max_tokens are used when the spec names none.
func TestPlanReplayDefaults(t *testing.T) {
	t.Parallel()
	p, err := planReplay(Options{})
	require.NoError(t, err)
	require.Equal(t, ReplayFromDefault, p.ro.From)
	require.Equal(t, ReplayLimitsDefault, p.limits)
	require.InDelta(t, ReplayBurstSecondsDefault, p.depthSeconds, 0)
	require.Equal(t, ReplayBatchDefault, p.services[2].requests)
	require.Equal(t, llm.Low, p.batchClass)
	require.Equal(t, [llm.NumPriorities]bool{true, true, false, false}, p.interactive)
	share := float64(p.services[0].input+p.services[1].input) / (float64(ReplayLimitsDefault.ITPM) * 4)
	require.InDelta(t, 0.41, share, 0.05, "the interactive traffic needs about 41 %% of the input quota")
	require.Equal(t, mock.OTPMReserve, p.otpmMode)
	require.Equal(t, upstream.OutputReservationMaxTokens, p.outputReservation)
	p, err = planReplay(Options{OTPMMode: mock.OTPMRealtime, OutputReservation: upstream.OutputReservationLearned})
	require.NoError(t, err)
	require.Equal(t, mock.OTPMRealtime, p.otpmMode, "the mock's and the oracles' output accounting")
	require.Equal(t, upstream.OutputReservationLearned, p.outputReservation, "the gateway's")
	require.Contains(t, strings.Join(p.setup(), "\n"), "output_reservation learned")

	dir := t.TempDir()
	file := dir + "/t.csv"
	require.NoError(t, writeFile(file, "timestamp,input_tokens,output_tokens,class,max_tokens\n0.5,10,20,normal,30\n1,10,20,,\n"))
	p, err = planReplay(Options{Replay: ReplayOptions{Traces: []TraceSpec{{Source: file}}, Batch: ReplayNoBatch}})
	require.NoError(t, err)
	require.Equal(t, -1, p.batchGroup)
	require.Len(t, p.items, 2)
	require.Equal(t, llm.Normal, p.items[0].Priority, "the row's class")
	require.Equal(t, 30, p.items[0].MaxTokens, "the row's max_tokens")
	require.Equal(t, llm.Critical, p.items[1].Priority, "the first trace's default")
	require.Equal(t, ReplayMaxTokensMin, p.items[1].MaxTokens)
}

func TestReplayOptionsRejected(t *testing.T) {
	t.Parallel()
	s, err := Lookup("trace")
	require.NoError(t, err)
	for _, tc := range []struct {
		r    ReplayOptions
		want string
	}{
		{ReplayOptions{Speed: -1}, "Replay.Speed must be in [0, 1000]"},
		{ReplayOptions{TokenScale: math.Inf(1)}, "Replay.TokenScale"},
		{ReplayOptions{Traces: []TraceSpec{{Source: ""}}}, "Replay.Traces[0].Source"},
		{ReplayOptions{Traces: []TraceSpec{{Source: "a", Class: "urgent"}}}, "Replay.Traces[0].Class"},
		{ReplayOptions{Batch: -2}, "Replay.Batch must be"},
		{ReplayOptions{BatchClass: "x"}, "Replay.BatchClass"},
		{ReplayOptions{Profile: "fast"}, "Replay.Profile"},
		{ReplayOptions{Limits: mock.Limits{TPM: 5}}, "Replay.Limits"},
		{ReplayOptions{Window: -time.Second}, "Replay.Window must be >= 0"},
		{ReplayOptions{TTFT: -1}, "Replay.TTFT must be >= 0"},
		{ReplayOptions{BurstSeconds: -1}, "Replay.BurstSeconds must be in [0, 3600]"},
		{ReplayOptions{Speed: -1, Batch: -5}, "Replay.Speed must be in [0, 1000] (0 = default), got -1\nReplay.Batch must be"},
	} {
		_, err := s.Run(t.Context(), Options{Replay: tc.r})
		require.ErrorContains(t, err, tc.want)
		_, ok := errors.AsType[*OptionsError](err)
		require.True(t, ok, "%T", err)
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
