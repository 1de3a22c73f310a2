package cluster_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
	"github.com/sluicehq/sluice/internal/llm"
)

// stubMember is an upstream with a fixed backlog that records what the
// node applies.
type stubMember struct {
	key string
	mu  sync.Mutex
	// queued low-priority requests of 1 unit each against a 600 RPM quota
	queued int
	share  float64
	slots  int
	paused time.Time
}

func (m *stubMember) Key() string { return m.key }
func (m *stubMember) Load() flow.ClusterLoad {
	m.mu.Lock()
	defer m.mu.Unlock()
	var l flow.ClusterLoad
	l.Capacity[flow.Requests] = 600
	l.Queued[llm.Low][flow.Requests] = float64(m.queued)
	l.QueuedCount[llm.Low] = m.queued
	l.Weights = [llm.NumPriorities]float64{8, 4, 2, 1}
	l.MaxConcurrency = 12
	l.PausedUntil = m.paused
	return l
}
func (m *stubMember) Apply(share float64, slots int) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.share, m.slots = share, slots
	return 0
}
func (m *stubMember) Credit(float64) {}
func (m *stubMember) Pause(until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if until.After(m.paused) {
		m.paused = until
	}
}
func (m *stubMember) Breaker(time.Time, bool, time.Time) {}
func (m *stubMember) get() (float64, int, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.share, m.slots, m.paused
}

func TestNodesSharePausesAndLead(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := jobstoretest.PostgresDSN(t)
		nodesSharePausesAndLead(t, func() (cluster.Backend, error) { return cluster.OpenPostgres(context.Background(), dsn) })
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		url := redisURL(t) + "?key_prefix=" + t.Name()
		nodesSharePausesAndLead(t, func() (cluster.Backend, error) { return cluster.OpenRedis(context.Background(), url) })
	})
}

func nodesSharePausesAndLead(t *testing.T, open func() (cluster.Backend, error)) {
	ctx := context.Background()
	key := cluster.Key("anthropic", "sk-test-"+t.Name())
	cfg := cluster.Config{SyncInterval: 30 * time.Millisecond, LeaseTTL: 900 * time.Millisecond}
	var nodes []*cluster.Node
	var members []*stubMember
	for i, q := range []int{100, 10, 10} {
		b, err := open()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		m := &stubMember{key: key, queued: q}
		c := cfg
		c.NodeID = []string{"a", "b", "c"}[i]
		n, err := cluster.NewNode(c, b, []cluster.Member{m}, nil, nil, nil)
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		nodes, members = append(nodes, n), append(members, m)
	}
	stopped := make([]bool, 3)
	t.Cleanup(func() {
		for i, n := range nodes {
			if !stopped[i] {
				require.NoError(t, n.Stop(ctx))
			}
		}
	})
	// Shares converge towards demand and never sum above 1.
	require.Eventually(t, func() bool {
		var sum float64
		degraded := false
		for i, m := range members {
			s, _, _ := m.get()
			sum += s
			degraded = degraded || nodes[i].Status().Degraded
		}
		if !degraded { // a fallback share is outside the invariant (docs/cluster.md)
			require.LessOrEqual(t, sum, 1+1e-9)
		}
		a, _, _ := members[0].get()
		return a > 0.7 && sum > 0.95
	}, 10*time.Second, 10*time.Millisecond)
	// Exactly one leader.
	require.Eventually(t, func() bool {
		leaders := 0
		for _, n := range nodes {
			if n.IsLeader() {
				leaders++
			}
		}
		return leaders == 1
	}, 5*time.Second, 10*time.Millisecond)
	// A pause at b reaches a and c.
	until := time.Now().Add(5 * time.Second).Truncate(time.Microsecond)
	members[1].Pause(until)
	require.Eventually(t, func() bool {
		_, _, pa := members[0].get()
		_, _, pc := members[2].get()
		return pa.Equal(until) && pc.Equal(until)
	}, 5*time.Second, 5*time.Millisecond)
	// a leaves: b and c take its share.
	require.NoError(t, nodes[0].Stop(ctx))
	stopped[0] = true
	require.Eventually(t, func() bool {
		b, _, _ := members[1].get()
		c, _, _ := members[2].get()
		return b+c > 0.95
	}, 5*time.Second, 10*time.Millisecond)
	// The leadership moves off a (its lease expires).
	require.Eventually(t, func() bool { return nodes[1].IsLeader() || nodes[2].IsLeader() }, 5*time.Second, 10*time.Millisecond)
	st := nodes[1].Status()
	require.Len(t, st.Members, 1)
	require.False(t, st.Degraded)
}

// TestConfigValidateNamesTheField: a bad cluster config is reported by
// its YAML path, and a zero one is valid.
func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  cluster.Config
		want string
	}{
		{cluster.Config{Store: "memcached://h"}, `store: want postgres://…, redis://… or "off"`},
		{cluster.Config{SyncInterval: time.Millisecond}, "sync_interval: must be at least 10ms"},
		{cluster.Config{SyncInterval: time.Second, LeaseTTL: time.Second}, "lease_ttl: must be at least twice sync_interval"},
		{cluster.Config{NodeID: strings.Repeat("n", 201)}, "node_id: must be at most 200 characters"},
		{cluster.Config{ExpectedNodes: -1}, "expected_nodes: must be at least 1"},
	} {
		err := tc.cfg.Validate()
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), tc.want), "%v", err)
	}
	for _, ok := range []string{"", cluster.StoreOff, "postgres://h/db", "postgresql://h/db", "redis://h:6379/0", "rediss://h/1?key_prefix=eu"} {
		require.NoError(t, cluster.Config{Store: ok}.Validate(), ok)
	}
	d := cluster.Config{}.WithDefaults()
	require.Equal(t, cluster.SyncIntervalDefault, d.SyncInterval)
	require.Equal(t, cluster.LeaseTTLDefault, d.LeaseTTL)
	require.Equal(t, cluster.ExpectedNodesDefault, d.ExpectedNodes)
	require.NotEmpty(t, d.NodeID)
	require.Equal(t, d, d.WithDefaults(), "idempotent")
}
