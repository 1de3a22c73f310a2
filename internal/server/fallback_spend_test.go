package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// TestFallbackIsChargedAsItsModel: a request served by a fallback is
// charged on the fallback upstream at the price of the model it was sent
// as (sonnet rewritten to haiku), and the primary's failed attempts cost
// nothing.
func TestFallbackIsChargedAsItsModel(t *testing.T) {
	t.Parallel()
	r := newFallbackRig(t, mock.Config{Faults: mock.Faults{Outages: []mock.Outage{{Start: 0, Duration: time.Hour}}}}, mock.Config{}, nil)
	for range 40 {
		res, _ := r.send(t, llm.Normal, 0, nil)
		if res.err == nil && res.resp.Upstream == "fallback" {
			break
		}
		r.fc.Advance(250 * time.Millisecond)
	}
	var fallback, primary int64
	for _, c := range r.s.admit.Spend(r.fc.Now()).Clients {
		for _, m := range c.By {
			switch {
			case m.Upstream == "fallback":
				require.Equal(t, "claude-haiku-4-5", m.Model)
				fallback += m.Requests
			case m.Upstream == "primary" && m.USD > 0:
				primary += m.Requests
			}
		}
	}
	require.Positive(t, fallback, "a fallback served and was charged")
	require.Zero(t, primary, "the primary's failures are refunded")
	require.Zero(t, r.s.admit.Account("", r.fc.Now()).Day.Reserved)
}
