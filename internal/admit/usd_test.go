package admit

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUSDLogsInDecimals: a cost is logged as 0.00000615, not 6.15e-06,
// in a text log and in a JSON one, where it stays a number (issue 27).
func TestUSDLogsInDecimals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		text string
	}{
		{6.15e-06, "0.00000615"},
		{0, "0"},
		{1.5, "1.5"},
		{12345.678901, "12345.678901"},
		{1e-12, "0.000000000001"},
	} {
		var text, js bytes.Buffer
		slog.New(slog.NewTextHandler(&text, nil)).Info("request", "cost_usd", USD(tc.v))
		require.Contains(t, text.String(), " cost_usd="+tc.text+"\n")
		slog.New(slog.NewJSONHandler(&js, nil)).Info("request", "cost_usd", USD(tc.v))
		require.Contains(t, js.String(), `"cost_usd":`+tc.text+"}")
		var rec map[string]any
		require.NoError(t, json.Unmarshal(js.Bytes(), &rec))
		require.InDelta(t, tc.v, rec["cost_usd"], math.Abs(tc.v)*1e-12)
	}
}
