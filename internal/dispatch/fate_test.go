package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// TestFateTable: the one table that decides what a call means, for the
// sync retry loop and for jobs alike.
func TestFateTable(t *testing.T) {
	t.Parallel()
	now := t0
	b := flow.Backoff{Base: time.Second, Max: 8 * time.Second, RateJitter: 100 * time.Millisecond}
	no, yes := false, true
	hint := func(k llm.OutcomeKind, d time.Duration) llm.Outcome {
		return llm.Outcome{Kind: k, RetryAfter: d, HasRetryAfter: true}
	}
	cases := []struct {
		name     string
		p        dispatch.FateParams
		kind     dispatch.FateKind
		min, max time.Duration // bounds of At-now for Reschedule and Retry
	}{
		{"not sent reschedules at its wait", dispatch.FateParams{Sent: false, Wait: 3 * time.Second, Outcome: llm.Outcome{Kind: llm.Overload}},
			dispatch.Reschedule, 3 * time.Second, 3 * time.Second},
		{"success", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.Success}}, dispatch.Succeed, 0, 0},
		{"rate waits for its hint", dispatch.FateParams{Sent: true, Outcome: hint(llm.Rate, 20*time.Second)},
			dispatch.Retry, 20 * time.Second, 20*time.Second + 100*time.Millisecond},
		{"rate without a hint backs off to the ceiling", dispatch.FateParams{Sent: true, Burnt: 2, Outcome: llm.Outcome{Kind: llm.Rate}},
			dispatch.Retry, 4 * time.Second, 4*time.Second + 100*time.Millisecond},
		{"a second rate without a hint is terminal", dispatch.FateParams{Sent: true, HintlessRates: 1, Outcome: llm.Outcome{Kind: llm.Rate}},
			dispatch.Terminal, 0, 0},
		{"a second rate with a hint still retries", dispatch.FateParams{Sent: true, HintlessRates: 1, Outcome: hint(llm.Rate, time.Second)},
			dispatch.Retry, time.Second, time.Second + 100*time.Millisecond},
		{"overload: full jitter under the ceiling", dispatch.FateParams{Sent: true, Burnt: 1, Outcome: llm.Outcome{Kind: llm.Overload}},
			dispatch.Retry, 0, 2 * time.Second},
		{"transient never before the server's hint", dispatch.FateParams{Sent: true, Outcome: hint(llm.Transient, 30*time.Second)},
			dispatch.Retry, 30 * time.Second, 30*time.Second + 100*time.Millisecond},
		{"stream failure retries", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.StreamFail}}, dispatch.Retry, 0, time.Second},
		{"quota is terminal", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.Quota}}, dispatch.Terminal, 0, 0},
		{"client error is terminal", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.ClientError}}, dispatch.Terminal, 0, 0},
		{"x-should-retry false is terminal", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.Overload, ShouldRetry: &no}},
			dispatch.Terminal, 0, 0},
		{"x-should-retry true changes nothing", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.ClientError, ShouldRetry: &yes}},
			dispatch.Terminal, 0, 0},
		{"an unknown kind is terminal", dispatch.FateParams{Sent: true, Outcome: llm.Outcome{Kind: llm.OutcomeKind(42)}}, dispatch.Terminal, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, u := range []float64{0, 0.5, 0.999} {
				p := tc.p
				p.Backoff, p.Now, p.U = b, now, u
				f := dispatch.DecideFate(p)
				require.Equal(t, tc.kind, f.Kind, "u=%v", u)
				if tc.kind == dispatch.Reschedule || tc.kind == dispatch.Retry {
					wait := f.At.Sub(now)
					require.GreaterOrEqual(t, wait, tc.min, "u=%v", u)
					require.LessOrEqual(t, wait, tc.max, "u=%v", u)
				}
				require.Equal(t, tc.kind == dispatch.Retry || tc.kind == dispatch.Terminal, f.Kind.Burns())
			}
		})
	}
}
