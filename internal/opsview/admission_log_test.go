package opsview

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/upstream"
)

// TestAdmissionLog: the admission layer's refusals and holds, fed through
// its observer, are counted per (kind, reason, client, upstream) with the
// last one's time and message, listed the most recent first in
// /v1/status; a caller that is not an admin sees its own only; the log
// stays bounded, forgetting the least recent first.
func TestAdmissionLog(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0).UTC()
	fc := clock.NewFake(t0)
	v := New(Config{Upstreams: []upstream.Config{claude}, Clock: fc})
	obs := v.AdmitObserver()
	obs.Refused("acme", "claude", admit.RefusedBudget, "the daily budget of $1.00 for client acme is exhausted (first)")
	fc.Advance(time.Second)
	obs.Refused("acme", "claude", admit.RefusedBudget, "the daily budget of $1.00 for client acme is exhausted (second)")
	fc.Advance(time.Second)
	obs.Held("bob", "claude", admit.HeldClientLimit, "client bob's requests_per_minute (30) on claude")
	fc.Advance(time.Second)
	obs.Refused("bob", "claude", admit.RefusedAccess, `client bob may not use model "gpt-4o"`)

	st := v.Status(t.Context())
	require.Equal(t, []AdmissionEvent{
		{Kind: AdmissionRefused, Reason: admit.RefusedAccess, Client: "bob", Upstream: "claude", Count: 1, LastAt: t0.Add(3 * time.Second),
			LastMessage: `client bob may not use model "gpt-4o"`},
		{Kind: AdmissionHeld, Reason: admit.HeldClientLimit, Client: "bob", Upstream: "claude", Count: 1, LastAt: t0.Add(2 * time.Second),
			LastMessage: "client bob's requests_per_minute (30) on claude"},
		{Kind: AdmissionRefused, Reason: admit.RefusedBudget, Client: "acme", Upstream: "claude", Count: 2, LastAt: t0.Add(time.Second),
			LastMessage: "the daily budget of $1.00 for client acme is exhausted (second)"},
	}, st.Admission)
	st.ForCaller("acme", false)
	require.Len(t, st.Admission, 1)
	require.Equal(t, "acme", st.Admission[0].Client)

	for i := range admissionLogMax + 10 {
		fc.Advance(time.Millisecond)
		obs.Refused(fmt.Sprintf("c%d", i), "claude", admit.RefusedAccess, "no")
	}
	st = v.Status(t.Context())
	require.Len(t, st.Admission, admissionLogMax)
	require.Equal(t, fmt.Sprintf("c%d", admissionLogMax+9), st.Admission[0].Client, "the most recent kept")
	for _, e := range st.Admission {
		require.NotEqual(t, "acme", e.Client, "the least recent forgotten")
	}
}
