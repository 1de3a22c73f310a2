package quota_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// TestSharedBudgetNeverOvercommitted: three nodes' ledgers hold shares of
// one client's $10 budget summing to 1; each reserves random worst cases
// every 100 ms, settles them 0–3 s later at or below them, writes its
// settled spend to a shared store every 5 s and reads the store back
// right after (the nodes' flushes staggered, as the spender does). At
// every instant the spend settled anywhere plus every reservation in
// flight stays within the budget, though each node sees the others'
// spend only seconds late; and most of the budget is spent.
func TestSharedBudgetNeverOvercommitted(t *testing.T) {
	t.Parallel()
	const lag = 10 * time.Second // two flush periods (5 s, every 50 steps)
	limit := usd(10)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		shares := []float64{0.5, 0.3, 0.2}
		type inflight struct {
			h     quota.Hold
			until time.Time
		}
		type node struct {
			l       *quota.Ledger
			pending pricing.Amount
			open    []inflight
		}
		nodes := make([]*node, len(shares))
		for i, s := range shares {
			l := quota.NewLedger()
			l.SetLimits("c", quota.Limits{Total: limit}, t0)
			l.SetVisibleAfter(lag)
			l.SetShare("c", s, t0)
			nodes[i] = &node{l: l}
		}
		var store, settled pricing.Amount
		now := t0
		for step := range 1200 { // 2 min
			now = now.Add(100 * time.Millisecond)
			for i, n := range nodes {
				kept := n.open[:0]
				for _, o := range n.open {
					if o.until.After(now) {
						kept = append(kept, o)
						continue
					}
					actual := pricing.Amount(rng.Int64N(int64(o.h.Amount()) + 1))
					n.l.Settle(o.h, actual, now)
					n.pending += actual
					settled += actual
				}
				n.open = kept
				for range rng.IntN(3) {
					h, err := n.l.Reserve("c", usd(0.05+rng.Float64()*0.4), now)
					if err == nil {
						n.open = append(n.open, inflight{h: h, until: now.Add(time.Duration(rng.IntN(30)) * 100 * time.Millisecond)})
					}
				}
				if step%50 == 17*i%50 { // each node's flush, then its read-back
					store += n.pending
					n.l.Written("c", n.pending, now)
					n.pending = 0
					n.l.Rebase("c", 0, 0, store, now)
				}
			}
			committed := settled
			for _, n := range nodes {
				for _, o := range n.open {
					committed += o.h.Amount()
				}
			}
			require.LessOrEqual(t, committed, limit, "seed %d at %v: the cluster committed %s of %s", seed, now.Sub(t0), committed, limit)
		}
		require.Greater(t, settled, usd(5), "seed %d: most of the budget is spent", seed)
	}
}

// TestSharedBudgetRefusalIsPending: a request over this node's share is
// refused as pending (worth a retry soon: the share grows with demand)
// and counted as refused demand; a share of 1 is no share at all.
func TestSharedBudgetRefusalIsPending(t *testing.T) {
	t.Parallel()
	l := quota.NewLedger()
	l.SetLimits("c", quota.Limits{Day: usd(1)}, t0)
	l.SetShare("c", 0.25, t0)
	h, err := l.Reserve("c", usd(0.2), t0)
	require.NoError(t, err)
	_, err = l.Reserve("c", usd(0.1), t0)
	e := exceeded(t, err)
	require.True(t, e.Pending)
	require.InDelta(t, 0.25, e.Share, 1e-9)
	s := l.Shared("c", t0)
	require.Equal(t, usd(0.2), s.Committed)
	require.Equal(t, usd(0.1), s.Refused)
	require.InDelta(t, 0.2, s.Using, 1e-9)
	l.Settle(h, usd(0.2), t0)
	require.Equal(t, usd(0.2), l.Shared("c", t0).Committed, "settled here, not yet seen by the others")
	l.SetShare("c", 1, t0)
	_, err = l.Reserve("c", usd(0.5), t0)
	require.NoError(t, err, "the whole budget: only spent + reserved + need <= limit")
}
