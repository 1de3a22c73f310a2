package scenario

import (
	"time"

	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverheadTiny runs the overhead comparison at a tiny size: every
// system answers every request, and each one's figures are reported.
func TestOverheadTiny(t *testing.T) {
	t.Parallel()
	s, err := Lookup("overhead")
	require.NoError(t, err)
	r, err := s.Run(t.Context(), Options{Rates: []int{100}, Rounds: 2, Round: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, r.Tables, 1)
	require.Len(t, r.Tables[0].Rows, 3, "direct, bare proxy, sluice")
	for _, sys := range []string{"direct", "bare", "sluice"} {
		require.Zero(t, r.Figures[sys+"_failed_100"], sys)
		require.Positive(t, r.Figures[sys+"_p50_ms_100"], sys)
		require.Contains(t, r.Figures, sys+"_cpu_s_per_1k_100")
	}
	require.Contains(t, r.Figures, "sluice_added_p99_ms_100")
	require.Contains(t, r.Figures, "bare_added_cpu_s_per_1k_100")
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.Zero(t, median(nil))
	require.InDelta(t, 2.0, median([]float64{3, 1, 2}), 1e-9)
	require.InDelta(t, 2.5, median([]float64{4, 1, 2, 3}), 1e-9)
}
