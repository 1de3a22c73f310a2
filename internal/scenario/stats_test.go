package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i + 1)
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", []time.Duration{7}, 99, 7},
		{"median of ten is the fifth", ten, 50, 5},
		{"p95 of ten is the tenth", ten, 95, 10},
		{"p90 of ten is the ninth", ten, 90, 9},
		{"p91 of ten rounds the rank up", ten, 91, 10},
		{"p99 of a hundred", hundred, 99, 99},
		{"p95 of a hundred", hundred, 95, 95},
		{"p100 is the maximum", hundred, 100, 100},
		{"p0 is the minimum", hundred, 0, 1},
		{"above 100 is the maximum", ten, 150, 10},
		{"negative is the minimum", ten, -5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Percentile(tc.sorted, tc.p))
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []time.Duration
		want   Summary
	}{
		{"empty", nil, Summary{}},
		{"unsorted input", []time.Duration{30, 10, 20, 40},
			Summary{Count: 4, Avg: 25, P50: 20, P95: 40, P99: 40, Max: 40}},
		{"one outlier moves p99 not p50", append(repeat(10, 99), 1000),
			Summary{Count: 100, Avg: 19, P50: 10, P95: 10, P99: 10, Max: 1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := append([]time.Duration(nil), tc.values...)
			require.Equal(t, tc.want, Summarize(tc.values))
			require.Equal(t, in, tc.values, "the input is not reordered")
		})
	}
}

func repeat(v time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = v
	}
	return out
}
