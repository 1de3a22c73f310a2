package opsview

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/upstream"
)

// fakeAdmission answers the admission layer's reads with fixed values.
type fakeAdmission struct{}

func (fakeAdmission) ClientLimits(time.Time) []admit.ClientLimitStatus {
	return []admit.ClientLimitStatus{{Client: "web", Upstream: "claude"}}
}
func (fakeAdmission) Spend(time.Time) *admit.SpendStatus {
	return &admit.SpendStatus{PricesAsOf: "x", Clients: []admit.ClientSpend{{Client: "ops"}, {Client: "web"}}}
}
func (fakeAdmission) Accounts(time.Time) []quota.Account { return nil }

// fakeCluster is a node sharing claude's quota with one other node.
type fakeCluster struct{ st cluster.Status }

func (c fakeCluster) ClusterStatus() (cluster.Status, bool) { return c.st, c.st.Node != "" }

// TestStatusReadsItsSources: the status document is built from what the
// engines, the admission layer and the cluster node report, and the
// requests the server says it is serving; ForCaller leaves a client that
// is not an admin its own holds only.
func TestStatusReadsItsSources(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fc := clock.NewFake(t0)
	v := New(Config{Clock: fc, Clients: []string{"web"}, AnonymousClient: "default", Upstreams: []upstream.Config{
		{Name: "claude", Protocol: llm.Anthropic, Fallbacks: []upstream.Fallback{{Upstream: "backup"}}},
		{Name: "backup", Protocol: llm.Anthropic},
	}})
	e := &fakeEngine{}
	e.snap.Queued[llm.Low] = 2
	e.snap.InFlight, e.snap.ConcurrencyLimit, e.snap.RateScale, e.snap.Breaker = 1, 4, 1, flow.Closed
	e.snap.Buckets[flow.Requests] = flow.BucketState{Capacity: 60, Depth: 60, Level: 10.04}
	e.x.Waiting = dispatch.WaitReason{Reason: "quota", Dimension: "requests", Until: t0.Add(time.Second)}
	e.x.Held = []dispatch.HeldClient{{Class: llm.Low, Client: "web", Queued: 2, Limit: "client web's requests_per_minute (30) on claude"},
		{Class: llm.Low, Client: "ops", Queued: 1, Limit: "client ops's requests_per_minute (1) on claude"}}
	e.x.OldestArrival[llm.Low] = t0.Add(-3 * time.Second)
	e.keys = []dispatch.KeyState{{Fingerprint: "ab12", MaxConcurrency: 4, Requests: 7}}
	v.Bind(Sources{Engines: map[string]Engine{"claude": e}, Admission: fakeAdmission{}, Cluster: fakeCluster{cluster.Status{
		Node: "n1", Members: []cluster.MemberStatus{{Key: "claude/ab12", Share: 0.5, Slots: 2,
			Leases: []cluster.Lease{{Node: "n1", Share: 0.5, ExpiresAt: t0}}}}}}})
	defer v.Serving("claude", "req_1", "web", "low", t0.Add(-2*time.Second))()
	defer v.Serving("claude", "req_2", "key-0f0f0f0f", "normal", t0.Add(-time.Second))()

	st := v.Status(t.Context())
	require.Len(t, st.Upstreams, 2)
	u := st.Upstreams[0]
	require.Equal(t, []string{"backup"}, u.Fallbacks)
	require.Equal(t, 2, u.Queued["low"])
	require.Equal(t, 3.0, u.OldestWait["low"])
	require.Equal(t, "quota", u.WaitingOn.Reason)
	require.Len(t, u.Held, 2)
	require.Equal(t, BucketStatus{LimitPerMinute: 60, Depth: 60, Level: 10, Used: 50}, u.Buckets["requests"], "requests to a tenth")
	require.Equal(t, "closed", u.Breaker)
	require.Equal(t, 2, u.OpenRequests)
	require.Equal(t, OpenRequest{ID: "req_1", Client: "web", Priority: "low", AgeSeconds: 2}, u.Oldest[0])
	require.Equal(t, "other", u.Oldest[1].Client, "a key that is no configured client")
	require.Equal(t, []KeyStatus{{Key: "ab12", MaxConcurrency: 4, Requests: 7, Buckets: map[string]BucketStatus{}}}, u.Keys)
	require.Nil(t, u.Jobs, "no job queue")
	require.Equal(t, UpstreamStatus{Name: "backup", Protocol: llm.Anthropic, Queued: map[string]int{}, OldestWait: map[string]float64{},
		Buckets: map[string]BucketStatus{}, BreakerHistory: []BreakerEventStatus{}, Oldest: []OpenRequest{}}, st.Upstreams[1],
		"an upstream whose engine cannot report")
	require.Equal(t, "claude", st.Cluster.Upstreams[0].Name)
	require.Equal(t, []ClientUsage{{Client: "web"}}, st.Clients, "configured clients, zeros included")
	require.Len(t, st.ClientLimits, 1)
	require.NotNil(t, st.Spend)

	st.ForCaller("web", false)
	require.Equal(t, []HeldClient{{Client: "web", Priority: "low", Queued: 2, Limit: "client web's requests_per_minute (30) on claude"}},
		st.Upstreams[0].Held)
	require.Nil(t, st.Clients)
	require.Nil(t, st.ClientLimits)
	require.Equal(t, []admit.ClientSpend{{Client: "web"}}, st.Spend.Clients, "a client sees its own spend and budget only")
	require.Empty(t, st.Upstreams[0].Oldest[0].Client)
}

// TestWaitingOnAClientLimitIsCutForOtherCallers: a queue held by a
// client's own limit says so in waiting_on, naming the client and the
// limit to an admin and to that client; another client sees the reason
// and when it lifts, not whose limit it is.
func TestWaitingOnAClientLimitIsCutForOtherCallers(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	limit := "client ops's requests_per_minute (1) on claude"
	for _, tc := range []struct {
		caller        string
		admin         bool
		client, limit string
	}{
		{"root", true, "ops", limit},
		{"ops", false, "ops", limit},
		{"web", false, "", ""},
	} {
		t.Run(tc.caller, func(t *testing.T) {
			t.Parallel()
			v := New(Config{Clock: clock.NewFake(t0), Upstreams: []upstream.Config{{Name: "claude", Protocol: llm.Anthropic}}})
			e := &fakeEngine{}
			e.snap.Queued[llm.High] = 1
			e.x.Waiting = dispatch.WaitReason{Reason: dispatch.WaitClientLimit, Client: "ops", Limit: limit, Until: t0.Add(time.Minute)}
			e.x.Held = []dispatch.HeldClient{{Class: llm.High, Client: "ops", Queued: 1, Limit: limit, Until: t0.Add(time.Minute)}}
			v.Bind(Sources{Engines: map[string]Engine{"claude": e}})
			st := v.Status(t.Context())
			st.ForCaller(tc.caller, tc.admin)
			until := t0.Add(time.Minute)
			require.Equal(t, &WaitingOn{Reason: "client_limit", Client: tc.client, Limit: tc.limit, Until: &until}, st.Upstreams[0].WaitingOn)
			require.Equal(t, tc.client != "", len(st.Upstreams[0].Held) == 1)
		})
	}
}
