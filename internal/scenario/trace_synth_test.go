package scenario

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBurstyTraceStatistics: the built-in synthetic trace is bursty (busy
// minutes carry more than 10× the requests of quiet ones) and heavy-tailed
// (input p99 ≥ 4× p50), with the mean rate the on/off process implies.
func TestBurstyTraceStatistics(t *testing.T) {
	t.Parallel()
	tr, err := LoadTrace(SyntheticBurstyName)
	require.NoError(t, err)
	checkTrace(t, tr)
	perMinute := make([]int, 60)
	var inputs []int
	for _, r := range tr.Records {
		perMinute[int(r.At/time.Minute)]++
		inputs = append(inputs, r.InputTokens)
	}
	slices.Sort(perMinute)
	quiet, busy := perMinute[6], perMinute[54] // the 10th and 90th percentile minutes
	require.Positive(t, quiet)
	require.Greater(t, float64(busy)/float64(quiet), 10.0, "p90 minute %d, p10 minute %d", busy, quiet)
	slices.Sort(inputs)
	p50, p99 := inputs[len(inputs)/2], inputs[len(inputs)*99/100]
	require.GreaterOrEqual(t, float64(p99)/float64(p50), 4.0, "input p50 %d, p99 %d", p50, p99)
	// Mean rate: (12 × 30 s + 0.25 × 90 s) / 120 s = 3.19 req/s.
	rate := float64(len(tr.Records)) / time.Hour.Seconds()
	require.InDelta(t, 3.19, rate, 3.19*0.3)
}

func TestBurstyTraceIsSeeded(t *testing.T) {
	t.Parallel()
	short := BurstyTrace{Duration: 10 * time.Minute}
	a, err := GenerateBursty("a", short)
	require.NoError(t, err)
	b, err := GenerateBursty("b", short)
	require.NoError(t, err)
	require.Equal(t, a.Records, b.Records)
	short.Seed = 2
	c, err := GenerateBursty("c", short)
	require.NoError(t, err)
	require.NotEqual(t, a.Records, c.Records)
	for _, bad := range []BurstyTrace{{OnRate: -1}, {TailShare: 2}, {Duration: 48 * time.Hour}, {InputMax: -1}, {OnMean: -time.Second}} {
		_, err := GenerateBursty("bad", bad)
		require.ErrorContains(t, err, "must be")
	}
}

func TestBuiltinTraces(t *testing.T) {
	t.Parallel()
	want := map[string]int{"azure-code": 8819, "azure-conv": 19366, "mooncake-conv": 12031}
	for _, b := range BuiltinTraces() {
		tr, err := LoadTrace(b.Name)
		require.NoError(t, err, b.Name)
		require.Equal(t, b.Name, tr.Name)
		checkTrace(t, tr)
		if n, ok := want[b.Name]; ok {
			require.Len(t, tr.Records, n, b.Name)
		}
	}
	code, err := LoadTrace("azure-code")
	require.NoError(t, err)
	require.Equal(t, 77299*time.Millisecond, code.Records[0].At, "aligned with azure-conv, which starts at 0")
	mc, err := LoadTrace("mooncake-conv")
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, mc.Records[0].HashIDs)
	_, err = LoadTrace("no-such-trace")
	require.ErrorIs(t, err, ErrUnknownTrace)
	require.ErrorContains(t, err, "azure-code, azure-conv, mooncake-conv, synthetic-bursty")
}
