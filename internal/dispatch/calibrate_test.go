package dispatch_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestCalibratedReservation: after CalibrationWarmup answers of a model
// that report 10 input tokens for an estimate of 50 and 5 output tokens
// for a max_tokens of 100, the next request reserves the calibrated
// input (the ratio 0.2, bounded at InputRatioMin: 25 tokens) and, with
// output_reservation learned, the learned quantile of max_tokens (the
// upper edge of the 4-6% bin: 6 tokens) instead of max_tokens; with the
// default (max_tokens) the output reservation stays the worst case. The
// old engine reserved the front door's estimate as it was: 50 and 100.
func TestCalibratedReservation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode    string
		in, out float64
	}{
		{upcfg.OutputReservationMaxTokens, 25, 100},
		{upcfg.OutputReservationLearned, 25, 6},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			hold, arrived := make(chan struct{}), make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if calls.Add(1) == dispatch.CalibrationWarmup+1 {
					close(arrived)
					<-hold
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, okMessage)
			}))
			t.Cleanup(srv.Close)
			d, _, _ := start(t, &upstream{Server: srv}, func(c *dispatch.Config) {
				c.Limits.InputTokensPerMinute = 600_000
				c.Limits.OutputTokensPerMinute = 600_000
				c.OutputReservation = tt.mode
			})
			for range dispatch.CalibrationWarmup {
				require.NoError(t, (<-doAsync(context.Background(), d, request())).err)
			}
			before := d.Snapshot().Buckets
			res := doAsync(context.Background(), d, request())
			<-arrived
			during := d.Snapshot().Buckets
			close(hold)
			require.NoError(t, (<-res).err)
			require.InDelta(t, tt.in, before[flow.InputTokens].Level-during[flow.InputTokens].Level, 1e-9, "input reserved")
			require.InDelta(t, tt.out, before[flow.OutputTokens].Level-during[flow.OutputTokens].Level, 1e-9, "output reserved")
		})
	}
}
