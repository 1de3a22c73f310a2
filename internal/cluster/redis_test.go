package cluster_test

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/cluster/clustertest"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

// redisURL returns SLUICE_TEST_REDIS_URL: skipped when it is unset,
// failed when it is set but the server is unreachable. Every test uses
// keys of its own, so tests share the database.
func redisURL(t testing.TB) string {
	url := os.Getenv("SLUICE_TEST_REDIS_URL")
	if url == "" {
		t.Skip("SLUICE_TEST_REDIS_URL is not set; skipping Redis tests")
	}
	b, err := cluster.OpenRedis(context.Background(), url)
	require.NoError(t, err, "SLUICE_TEST_REDIS_URL is set but Redis is unreachable")
	require.NoError(t, b.Close())
	return url
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	url := redisURL(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenRedis(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}

// TestConformanceMemory: the in-process backend the fake-clock tests use
// behaves as the stores do.
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	clustertest.Run(t, func(t *testing.T) cluster.Backend { return cluster.NewMemory(nil) })
}

// TestNodeOnRedisFallsBackAndResumes: a node whose Redis goes away (a TCP
// proxy cut) falls back to 1/N and, once Redis is back, shares again.
func TestNodeOnRedisFallsBackAndResumes(t *testing.T) {
	t.Parallel()
	base := redisURL(t)
	u, err := neturl.Parse(base)
	require.NoError(t, err)
	proxy := jobstoretest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	q := u.Query()
	q.Set("key_prefix", "test-"+t.Name())
	q.Set("dial_timeout", "200ms")
	u.RawQuery = q.Encode()
	ctx := context.Background()
	b, err := cluster.OpenRedis(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	m := &stubMember{key: cluster.Key("u", "k"), queued: 5}
	n, err := cluster.NewNode(cluster.Config{NodeID: "me", SyncInterval: 20 * time.Millisecond, LeaseTTL: 200 * time.Millisecond},
		b, []cluster.Member{m}, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() { require.NoError(t, n.Stop(ctx)) })
	share, _, _ := m.get()
	require.InDelta(t, 1, share, 1e-9, "alone: the whole quota")
	proxy.Cut()
	require.Eventually(t, func() bool { return n.Status().Degraded }, 5*time.Second, 5*time.Millisecond)
	require.False(t, n.IsLeader())
	proxy.Restore()
	require.Eventually(t, func() bool { return !n.Status().Degraded && n.IsLeader() }, 10*time.Second, 5*time.Millisecond)
	share, _, _ = m.get()
	require.InDelta(t, 1, share, 1e-9)
}

// TestRedisReadsLeasesWithoutIncarnations: a lease and a leadership an
// older release wrote (no incarnation) are taken over as a
// predecessor's (kept aside, waited for), never renewed as ours.
func TestRedisReadsLeasesWithoutIncarnations(t *testing.T) {
	t.Parallel()
	prefix := "test-" + t.Name()
	url := redisURL(t) + "?key_prefix=" + prefix
	ctx := context.Background()
	raw, err := redis.ParseURL(redisURL(t))
	require.NoError(t, err)
	c := redis.NewClient(raw)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	key := cluster.Key("up", t.Name())
	leases, leader := prefix+":{"+key+"}:leases", prefix+":leader:{"+cluster.LeaderName+"}"
	t.Cleanup(func() { c.Del(ctx, leases, prefix+":{"+key+"}:signals", prefix+":{"+key+"}:learned", leader) })
	exp := time.Now().Add(time.Minute).UnixMicro()
	require.NoError(t, c.HSet(ctx, leases, "a", fmt.Sprintf("1 1 12 1 %d", exp)).Err())
	require.NoError(t, c.Set(ctx, leader, "a", time.Minute).Err())

	b, err := cluster.OpenRedis(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	g, err := b.Sync(ctx, cluster.Report{Key: key, Node: "a", Incarnation: "new", Demand: 1, MaxSlots: 12, TTL: time.Minute})
	require.NoError(t, err)
	require.Zero(t, g.Share, "the old lease is still held")
	require.Len(t, g.Leases, 2)
	require.Equal(t, "new", g.Leases[0].Incarnation)
	require.Equal(t, "a~", g.Leases[1].Node, "kept aside: %+v", g.Leases)
	require.InDelta(t, 1, g.Leases[1].Share, 1e-9)
	lead, err := b.Lead(ctx, cluster.LeaderName, "a", "new", time.Minute)
	require.NoError(t, err)
	require.False(t, lead, "the old process's leadership is not ours")
}
