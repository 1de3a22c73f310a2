package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
)

// flakyBackend grants half the quota among three leases, or fails while
// down.
type flakyBackend struct {
	mu   sync.Mutex
	down bool
}

var errDown = errors.New("store down")

func (f *flakyBackend) setDown(d bool) { f.mu.Lock(); f.down = d; f.mu.Unlock() }

func (f *flakyBackend) Sync(_ context.Context, r cluster.Report) (cluster.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return cluster.Grant{}, errDown
	}
	return cluster.Grant{Share: 0.5, Slots: 6, Leases: []cluster.Lease{
		{Node: r.Node, Share: 0.5}, {Node: "x", Share: 0.25}, {Node: "y", Share: 0.25}}}, nil
}
func (f *flakyBackend) Leave(context.Context, string, string, string) error { return nil }
func (f *flakyBackend) Lead(context.Context, string, string, string, time.Duration) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false, errDown
	}
	return true, nil
}
func (f *flakyBackend) Close() error { return nil }

// TestNodeFallsBackToOneNthAndResumes: with the store down past the
// lease's life the node runs on 1/N of the quota (N the last known node
// count), says so in its status and drops its leadership; when the store
// answers again, the grant applies (after the handover) and sharing
// resumes.
func TestNodeFallsBackToOneNthAndResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &flakyBackend{}
	m := &stubMember{key: cluster.Key("u", "k"), queued: 5}
	n, err := cluster.NewNode(cluster.Config{NodeID: "me", SyncInterval: 10 * time.Millisecond, LeaseTTL: 40 * time.Millisecond},
		b, []cluster.Member{m}, nil, nil, nil)
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	defer func() { require.NoError(t, n.Stop(ctx)) }()
	share, slots, _ := m.get()
	require.InDelta(t, 0.5, share, 1e-9)
	require.Equal(t, 6, slots)
	require.Eventually(t, n.IsLeader, time.Second, 5*time.Millisecond)

	b.setDown(true)
	require.Eventually(t, func() bool { return n.Status().Degraded }, 5*time.Second, 5*time.Millisecond)
	share, slots, _ = m.get()
	require.InDelta(t, 1.0/3, share, 1e-9, "1/N of the quota, N = 3 last known")
	require.Equal(t, 4, slots, "12 slots / 3")
	require.False(t, n.IsLeader(), "no maintenance while unsure")
	require.NotEmpty(t, n.Status().LastErr)

	b.setDown(false)
	require.Eventually(t, func() bool { return !n.Status().Degraded }, 5*time.Second, 5*time.Millisecond)
	// The handover keeps the fallback share for a lease's life, then the
	// grant applies.
	require.Eventually(t, func() bool { share, _, _ = m.get(); return share == 0.5 }, 5*time.Second, 5*time.Millisecond)
}
