package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/upstream"
)

func TestIdealDrain(t *testing.T) {
	t.Parallel()
	// The goodput scenario: 1,500 requests of 500 in / 150 out tokens
	// against RPM 3000, ITPM 300k, OTPM 60k with 10 s of depth.
	goodput := []DimNeed{
		{Name: "requests", Total: 1500, PerMinute: 3000},           // (1500-500)/50 = 20 s
		{Name: "input tokens", Total: 750_000, PerMinute: 300_000}, // (750k-50k)/5k = 140 s
		{Name: "output tokens", Total: 225_000, PerMinute: 60_000}, // (225k-10k)/1k = 215 s
	}
	tests := []struct {
		name        string
		needs       []DimNeed
		depth       float64
		want        time.Duration
		wantBinding string
	}{
		{"goodput scenario binds on output", goodput, 10, 215 * time.Second, "output tokens"},
		{"no depth: need over rate", goodput, 0, 225 * time.Second, "output tokens"},
		{"everything fits in the bucket", []DimNeed{{Name: "requests", Total: 10, PerMinute: 600}}, 10, 0, "requests"},
		{"unlimited dimensions are skipped", []DimNeed{
			{Name: "requests", Total: 1e9, PerMinute: 0},
			{Name: "input tokens", Total: 1200, PerMinute: 60}}, 0, 1200 * time.Second, "input tokens"},
		{"nothing limited", []DimNeed{{Name: "requests", Total: 5}}, 10, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, binding := IdealDrain(tc.needs, tc.depth)
			require.InDelta(t, tc.want.Seconds(), got.Seconds(), 1e-6)
			require.Equal(t, tc.wantBinding, binding)
		})
	}
}

func TestFairShares(t *testing.T) {
	t.Parallel()
	w := upstream.WeightsDefault // 8/4/2/1
	tests := []struct {
		name     string
		capacity float64
		demand   [llm.NumPriorities]float64
		want     [llm.NumPriorities]float64
	}{
		{"everyone overloaded: by weight", 15, [4]float64{100, 100, 100, 100}, [4]float64{8, 4, 2, 1}},
		{"enough for all: demand", 100, [4]float64{1, 2, 3, 4}, [4]float64{1, 2, 3, 4}},
		// Critical asks 0.67 of its 1.78; high 1.33 of the remaining
		// 2.67's 4/7; normal and low split the last 1.33 two to one.
		{"priority scenario mix at 2x", 10.0 / 3, [4]float64{2.0 / 3, 4.0 / 3, 10.0 / 3, 4.0 / 3},
			[4]float64{2.0 / 3, 4.0 / 3, 8.0 / 9, 4.0 / 9}},
		{"idle class gets nothing", 6, [4]float64{0, 100, 100, 0}, [4]float64{0, 4, 2, 0}},
		{"no capacity", 0, [4]float64{1, 1, 1, 1}, [4]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := FairShares(tc.capacity, tc.demand, w)
			for c := range got {
				require.InDelta(t, tc.want[c], got[c], 1e-9, "class %s", llm.Priority(c))
			}
		})
	}
}

func TestDemoFloor(t *testing.T) {
	t.Parallel()
	l := mock.Limits{RPM: 3000, ITPM: 120_000, OTPM: 30_000, TPM: 150_000}
	st := func(a, o mock.Counts) mock.Stats {
		return mock.Stats{Keys: map[string]mock.ScopeStats{anthropicKey: {Admitted: a}, openAIKey: {Admitted: o}}}
	}
	tests := []struct {
		name  string
		stats mock.Stats
		last  time.Duration
		want  time.Duration
	}{
		// Output binds: (18,350 − 5,000) / 500 = 26.7 s.
		{"the demo's output quota binds", st(mock.Counts{Requests: 900, InputTokens: 54_000, OutputTokens: 18_350},
			mock.Counts{Requests: 100, InputTokens: 6000, OutputTokens: 2000}), 20 * time.Second, 26700 * time.Millisecond},
		{"never before the last arrival", st(mock.Counts{Requests: 10, OutputTokens: 100}, mock.Counts{}), 20 * time.Second, 20 * time.Second},
		// OpenAI key: (400,000 − 25,000) / 2,500 = 150 s on TPM.
		{"the other key's bucket may bind", st(mock.Counts{Requests: 10}, mock.Counts{Requests: 100, InputTokens: 300_000, OutputTokens: 100_000}),
			time.Second, 150 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tc.want.Seconds(), demoFloor(tc.stats, l, tc.last).Seconds(), 1e-6)
		})
	}
}
