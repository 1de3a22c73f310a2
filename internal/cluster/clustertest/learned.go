package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/flow"
)

// runLearned runs the cases of the shared provider reports.
func runLearned(t *testing.T, open Open) {
	t.Run("LearnedLatestWinsPerDimension", func(t *testing.T) { t.Parallel(); learnedLatest(t, open(t)) })
	t.Run("LearnedSurvivesExpiry", func(t *testing.T) { t.Parallel(); learnedSurvives(t, open(t)) })
	t.Run("LearnedBadRecord", func(t *testing.T) { t.Parallel(); learnedBad(t, open(t)) })
	t.Run("LearnedAnnouncesOnlyAChangedLimit", func(t *testing.T) { t.Parallel(); learnedAnnounce(t, open(t)) })
}

// learnedAnnounce: a Listener hears of a limit whose value changed, and
// of nothing when the reports only renew it or carry a remaining (every
// sync does: announcing those would make every node sync at once, over
// and over). Absence is proven by a barrier: a changed limit on another
// key, published after the syncs that must announce nothing. Every store
// delivers its announcements in the order it publishes them (PostgreSQL
// in commit order, Redis and Memory in publish order) to a listener that
// hears them one by one, so once the barrier's is heard, an announcement
// of the syncs before it would have been heard already.
func learnedAnnounce(t *testing.T, b cluster.Backend) {
	l, ok := b.(cluster.Listener)
	if !ok {
		t.Skip("not a Listener")
	}
	ctx, cancel := context.WithCancel(context.Background())
	key, marker := uniqueKey(t), uniqueKey(t)
	heard := make(chan struct{}, 64)
	barriers := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Listen(ctx, func(k string) {
			switch k {
			case key:
				heard <- struct{}{}
			case marker:
				barriers <- struct{}{}
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	syncKey := func(key, node string, ls ...flow.ClusterReport) {
		t.Helper()
		r := report(key, node, 0, 1)
		r.Learned = ls
		_, err := b.Sync(ctx, r)
		require.NoError(t, err)
	}
	sync := func(node string, ls ...flow.ClusterReport) { t.Helper(); syncKey(key, node, ls...) }
	// Until the listener is up, publish a new limit now and then.
	lim := 100.0
	require.Eventually(t, func() bool {
		lim++
		sync("a", limit("k1", flow.Requests, lim, at(int(lim))))
		select {
		case <-heard:
			return true
		case <-time.After(100 * time.Millisecond): //nolint:forbidigo // the store announces on its own time
			return false
		}
	}, 10*time.Second, time.Millisecond)
	// barrier returns once every announcement published before it has
	// been heard.
	barrierLimit := 0.0
	barrier := func() {
		t.Helper()
		barrierLimit++
		syncKey(marker, "m", limit("k1", flow.Requests, barrierLimit, at(int(barrierLimit))))
		select {
		case <-barriers:
		case <-time.After(5 * time.Second): //nolint:forbidigo // the store announces on its own time
			require.Fail(t, "the barrier's changed limit is announced")
		}
	}
	barrier()
	for len(heard) > 0 {
		<-heard // announcements of the limits published while waiting for the listener
	}
	// The same limit again, later, from another node; remainings; nothing.
	sync("b", limit("k1", flow.Requests, lim, at(int(lim)+1)))
	sync("a", remaining("k1", flow.Requests, 5, at(int(lim)+1), at(int(lim)+2)))
	sync("b")
	sync("c")
	barrier()
	require.Empty(t, heard, "a renewed limit, a remaining or nothing: nothing announced")
	sync("b", remaining("k1", flow.Requests, 4, at(int(lim)+2), at(int(lim)+3)))
	sync("a")
	barrier()
	require.Empty(t, heard, "nothing changed: nothing announced")
	// A changed limit is announced.
	sync("c", limit("k1", flow.Requests, lim*2, at(int(lim)+10)))
	select {
	case <-heard:
	case <-time.After(5 * time.Second): //nolint:forbidigo // the store announces on its own time
		require.Fail(t, "a changed limit is announced")
	}
}

// at is an instant the stores keep exactly (microseconds).
func at(s int) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
}

func limit(acct string, d flow.Dim, lim float64, when time.Time) flow.ClusterReport {
	return flow.ClusterReport{Account: acct, Dim: d, Heard: flow.Heard{Limit: lim, LimitAt: when, Remaining: -1}}
}

func remaining(acct string, d flow.Dim, rem float64, sent, when time.Time) flow.ClusterReport {
	return flow.ClusterReport{Account: acct, Dim: d, Heard: flow.Heard{Remaining: rem, SentAt: sent, At: when, Reset: when.Add(time.Second)}}
}

// find returns the record of acct and d in g.
func find(t *testing.T, g cluster.Grant, acct string, d flow.Dim) flow.ClusterReport {
	t.Helper()
	for _, l := range g.Learned {
		if l.Account == acct && l.Dim == d {
			return l
		}
	}
	require.Failf(t, "no record", "%s/%s in %+v", acct, d, g.Learned)
	return flow.ClusterReport{}
}

func learnedLatest(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	// A node with nothing to report hears nothing.
	g, err := b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.Empty(t, g.Learned)

	r := report(key, "a", 0, 1)
	r.Learned = []flow.ClusterReport{limit("k1", flow.Requests, 1000, at(10)), remaining("k1", flow.Requests, 400, at(9), at(10))}
	_, err = b.Sync(ctx, r)
	require.NoError(t, err)
	// b, which never saw an answer, gets a's report.
	g, err = b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	require.Len(t, g.Learned, 1)
	l := find(t, g, "k1", flow.Requests)
	require.InDelta(t, 1000, l.Limit, 0)
	require.True(t, l.LimitAt.Equal(at(10)), "%v", l.LimitAt)
	require.Equal(t, "a", l.LimitNode)
	require.InDelta(t, 400, l.Remaining, 0)
	require.True(t, l.SentAt.Equal(at(9)) && l.At.Equal(at(10)) && l.Reset.Equal(at(11)), "%+v", l)
	require.Equal(t, "a", l.RemainingNode)

	// b learns a changed limit later: it wins; a's older limit, reported
	// late, does not overwrite it, but a's newer remaining does.
	r = report(key, "b", 0, 1)
	r.Learned = []flow.ClusterReport{limit("k1", flow.Requests, 2000, at(20))}
	_, err = b.Sync(ctx, r)
	require.NoError(t, err)
	r = report(key, "a", 0, 1)
	stale := limit("k1", flow.Requests, 500, at(15))
	stale.Remaining, stale.SentAt, stale.At = 7, at(29), at(30)
	r.Learned = []flow.ClusterReport{stale, remaining("k1", flow.Requests, 900, at(1), at(2))}
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	l = find(t, g, "k1", flow.Requests)
	require.InDelta(t, 2000, l.Limit, 0, "the latest limit wins")
	require.Equal(t, "b", l.LimitNode)
	require.InDelta(t, 7, l.Remaining, 0, "the latest remaining wins, whatever came after it in the report")
	require.True(t, l.At.Equal(at(30)))
	require.Equal(t, "a", l.RemainingNode)

	// Per dimension and per account: another dimension or key does not
	// touch this one.
	r = report(key, "c", 0, 1)
	r.Learned = []flow.ClusterReport{limit("k1", flow.InputTokens, 80000, at(5)), limit("k2", flow.Requests, 50, at(40))}
	g, err = b.Sync(ctx, r)
	require.NoError(t, err)
	require.Len(t, g.Learned, 3)
	require.InDelta(t, 2000, find(t, g, "k1", flow.Requests).Limit, 0)
	require.InDelta(t, 80000, find(t, g, "k1", flow.InputTokens).Limit, 0)
	in := find(t, g, "k1", flow.InputTokens)
	require.Less(t, in.Remaining, 0.0, "no remaining reported for it")
	require.True(t, in.At.IsZero())
	require.InDelta(t, 50, find(t, g, "k2", flow.Requests).Limit, 0)
	require.Equal(t, []string{"k1", "k1", "k2"}, []string{g.Learned[0].Account, g.Learned[1].Account, g.Learned[2].Account}, "ordered")

	// Another key's quota hears nothing of these.
	g, err = b.Sync(ctx, report(uniqueKey(t), "a", 0, 1))
	require.NoError(t, err)
	require.Empty(t, g.Learned)
}

func learnedSurvives(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	r := report(key, "a", 0, 1)
	r.TTL = 200 * time.Millisecond
	r.Learned = []flow.ClusterReport{limit("k1", flow.OutputTokens, 16000, at(1))}
	_, err := b.Sync(ctx, r)
	require.NoError(t, err)
	// a dies: its lease goes, its report stays.
	require.Eventually(t, func() bool {
		g, err := b.Sync(ctx, report(key, "b", 0, 1))
		require.NoError(t, err)
		return len(g.Leases) == 1
	}, 5*time.Second, 50*time.Millisecond)
	g, err := b.Sync(ctx, report(key, "b", 0, 1))
	require.NoError(t, err)
	l := find(t, g, "k1", flow.OutputTokens)
	require.InDelta(t, 16000, l.Limit, 0)
	require.Equal(t, "a", l.LimitNode)
	// And a Leave drops only the lease.
	require.NoError(t, b.Leave(ctx, key, "b", incOf("b")))
	g, err = b.Sync(ctx, report(key, "c", 0, 1))
	require.NoError(t, err)
	require.Len(t, g.Learned, 1)
}

func learnedBad(t *testing.T, b cluster.Backend) {
	ctx := context.Background()
	key := uniqueKey(t)
	for _, l := range []flow.ClusterReport{
		limit("", flow.Requests, 1, at(1)),
		limit("a/b", flow.Requests, 1, at(1)),
		limit("k", flow.NumDims, 1, at(1)),
		limit("k", -1, 1, at(1)),
	} {
		r := report(key, "a", 0, 1)
		r.Learned = []flow.ClusterReport{l}
		_, err := b.Sync(ctx, r)
		require.ErrorIs(t, err, cluster.ErrBadReport)
	}
}
