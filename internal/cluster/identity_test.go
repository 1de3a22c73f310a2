package cluster_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
)

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// find returns the records at level whose message contains msg, each as
// its attributes.
func (l *logRecords) find(level slog.Level, msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.records {
		if r.Level != level || !strings.Contains(r.Message, msg) {
			continue
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

// TestDefaultNodeIDIsUniquePerProcess: hostname-pid and a random suffix,
// drawn once per process (so WithDefaults stays idempotent).
func TestDefaultNodeIDIsUniquePerProcess(t *testing.T) {
	t.Parallel()
	a, b := cluster.Config{}.WithDefaults().NodeID, cluster.Config{}.WithDefaults().NodeID
	require.Equal(t, a, b, "one default per process")
	parts := strings.Split(a, "-")
	require.GreaterOrEqual(t, len(parts), 3, a)
	require.Len(t, parts[len(parts)-1], 6, "a 6 hex digit suffix: %s", a)
	require.Equal(t, "gw", cluster.Config{NodeID: "gw"}.WithDefaults().NodeID, "a configured id is kept")
}

// TestIncarnationOrder: the string round-trips, and the older is the
// earlier start, then the smaller token.
func TestIncarnationOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	for _, tc := range []struct {
		name  string
		a, b  cluster.Incarnation
		older bool
	}{
		{"earlier start", cluster.Incarnation{Token: "ff", Started: t0}, cluster.Incarnation{Token: "00", Started: t0.Add(time.Nanosecond)}, true},
		{"later start", cluster.Incarnation{Token: "00", Started: t0.Add(time.Second)}, cluster.Incarnation{Token: "ff", Started: t0}, false},
		{"same start, smaller token", cluster.Incarnation{Token: "0a", Started: t0}, cluster.Incarnation{Token: "0b", Started: t0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.older, tc.a.Older(tc.b))
			require.Equal(t, !tc.older, tc.b.Older(tc.a))
			back, err := cluster.ParseIncarnation(tc.a.String())
			require.NoError(t, err)
			require.True(t, back.Started.Equal(tc.a.Started))
			require.Equal(t, tc.a.Token, back.Token)
		})
	}
	_, err := cluster.ParseIncarnation("no-at-sign")
	require.ErrorIs(t, err, cluster.ErrBadIncarnation)
	inc := cluster.NewIncarnation(t0)
	require.Len(t, inc.Token, 8)
	require.NotContains(t, inc.String(), " ")
}

// TestNodesWithOneNodeIDEndDistinct: two nodes configured with one
// node_id on one Memory, on a fake clock moved only while both rest. The
// younger takes a fresh id and says so once at warn, naming both ids; the
// older keeps the configured one; the shares applied never sum above 1
// at any rest, the pair ends up using the quota, and one of them leads.
func TestNodesWithOneNodeIDEndDistinct(t *testing.T) {
	// Not parallel: clock.Settle reads the whole process's scheduler.
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := cluster.NewMemory(fc)
	key := cluster.Key("up", "sk-shared")
	cfg := cluster.Config{NodeID: "gw", SyncInterval: 100 * time.Millisecond, LeaseTTL: time.Second}
	ctx := context.Background()
	var nodes []*cluster.Node
	var members []*stubMember
	var logs []*logRecords
	for range 2 {
		m := &stubMember{key: key, queued: 5}
		l := &logRecords{}
		n, err := cluster.NewNode(cfg, mem, []cluster.Member{m}, fc, slog.New(l), nil)
		require.NoError(t, err)
		require.NoError(t, n.Start(ctx))
		t.Cleanup(func() { require.NoError(t, n.Stop(ctx)) })
		nodes, members, logs = append(nodes, n), append(members, m), append(logs, l)
		// The second starts 250 ms later: the younger.
		started := fc.Now()
		stepUntil(t, fc, func() bool { return fc.Now().Sub(started) >= 250*time.Millisecond })
	}
	sum := func() float64 {
		a, _, _ := members[0].get()
		b, _, _ := members[1].get()
		return a + b
	}
	worst := 0.0
	end := fc.Now().Add(3 * time.Second) // past every lease kept aside
	stepUntil(t, fc, func() bool {
		worst = max(worst, sum())
		return !fc.Now().Before(end)
	})
	require.LessOrEqual(t, worst, 1+1e-9, "the shares applied never sum above 1")
	require.Greater(t, sum(), 0.9, "the pair uses the quota")

	older, younger := nodes[0].Status(), nodes[1].Status()
	require.Equal(t, "gw", older.Node, "the older keeps the configured id")
	require.Equal(t, "gw", older.ConfiguredNode)
	require.Empty(t, older.DuplicateOf)
	require.NotEqual(t, "gw", younger.Node)
	require.True(t, strings.HasPrefix(younger.Node, "gw-"), younger.Node)
	require.Equal(t, "gw", younger.ConfiguredNode)
	require.Equal(t, older.Incarnation, younger.DuplicateOf)
	require.False(t, younger.RenamedAt.IsZero())
	require.Equal(t, younger.Node, nodes[1].ID())
	require.False(t, older.Degraded || younger.Degraded)
	require.True(t, nodes[0].IsLeader() != nodes[1].IsLeader(), "one leader")
	leases := older.Members[0].Leases
	require.Len(t, leases, 2, "one lease each, nothing left aside: %+v", leases)

	warned := append(logs[0].find(slog.LevelWarn, "takes a fresh id"), logs[1].find(slog.LevelWarn, "takes a fresh id")...)
	require.Len(t, warned, 1, "the rename is logged once")
	require.Equal(t, "gw", warned[0]["node_id"])
	require.Equal(t, younger.Node, warned[0]["new_node_id"])
	require.Equal(t, older.Incarnation, warned[0]["other_incarnation"])
	require.Empty(t, logs[0].find(slog.LevelWarn, "takes a fresh id"), "the older does not rename")
}

// TestDuplicateNodeIDKeepsTheQuota: two real dispatchers configured with
// one node_id share one quota through a Memory backend in front of the
// mock (20 requests/s, a 1 s burst, no safety margin), on a fake clock
// moved only while everything rests (the mock served in-process), and
// both are flooded: the provider answers no 429 (the cluster stays
// within the quota as with distinct ids), every request is answered, and
// the nodes end with distinct ids. (Without detection the provider
// answers many of them 429: docs/cluster.md, "Node identity and
// duplicates", has the figures.)
func TestDuplicateNodeIDKeepsTheQuota(t *testing.T) {
	// Not parallel: clock.Settle reads the whole process's scheduler.
	fc := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	const rpm = 1200
	m, err := mock.New(mock.Config{Limits: mock.Limits{RPM: rpm}, BurstSeconds: 1, Clock: fc})
	require.NoError(t, err)
	const up = "http://mock.invalid"
	ds, ns := startClusterNodesAs(t, fc, cluster.NewMemory(fc), []string{up, up}, []string{"gw", "gw"}, func(c *dispatch.Config) {
		c.Limits.RequestsPerMinute = rpm
		c.BurstSeconds = 1
		c.SafetyMargin, c.MaxSafetyMargin = 1, 1
		c.HTTPClient = &http.Client{Transport: inProcess{m.Handler()}}
	})
	const perNode = 60
	deadline := fc.Now().Add(10 * time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 2*perNode)
	for _, d := range ds {
		for range perNode {
			wg.Go(func() { errs <- do(d, clusterRequest(deadline, llm.Normal)) })
		}
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	stepUntil(t, fc, func() bool {
		select {
		case <-finished:
			return true
		default:
			return false
		}
	})
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	st := m.Stats().Overall
	t.Logf("mock: %v; node ids %q and %q", st.ByStatus, ns[0].ID(), ns[1].ID())
	require.Zero(t, st.ByStatus["429"], "the provider's 429s")
	require.EqualValues(t, 2*perNode, st.ByStatus["200"])
	require.NotEqual(t, ns[0].ID(), ns[1].ID())
}
