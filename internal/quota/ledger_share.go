package quota

import (
	"time"

	"github.com/sluicehq/sluice/internal/pricing"
)

// A budget shared by a cluster (internal/cluster, docs/budgets.md): every
// node that serves a client holds a share s of the client's budget, and
// the shares held never sum above 1. A node commits, per window, its
// reservations in flight plus its own spend the other nodes may not see
// yet (settled here and not yet in the shared store, or written there
// less than the visibility lag ago: SetVisibleAfter), and it admits a
// request only while
//
//	committed + need ≤ s × (limit − (spent − unseen) − held)
//
// where spent − unseen is the spend every node sees through the store
// (the others' requests in flight, SetHeld, count in it too).
// Since each node's commitments fit its share of the same remainder, the
// nodes' commitments together fit it whole: the cluster never commits
// more than the budget, in flight and unseen included, as long as each
// node reads the store back within the lag. A node holding the whole
// budget (s = 1: it alone serves the client, or no cluster) is not
// checked beyond the usual spent + reserved + need ≤ limit.

// clusterPart is an account's part of a shared budget.
type clusterPart struct {
	share   float64        // 0: not shared (the whole budget)
	pending pricing.Amount // settled here, not yet written to the store
	written []writtenSpend // written to the store less than the lag ago
	refused pricing.Amount // running sum of needs refused by the share
}

type writtenSpend struct {
	at     time.Time
	amount pricing.Amount
}

// unseen is this node's spend the others may not see yet, at now.
func (c *clusterPart) unseen(now time.Time, lag time.Duration) pricing.Amount {
	n := 0
	for n < len(c.written) && !c.written[n].at.Add(lag).After(now) {
		n++
	}
	c.written = c.written[n:]
	u := c.pending
	for _, w := range c.written {
		u += w.amount
	}
	return u
}

// SetVisibleAfter sets how long spend written to the shared store may
// take to be seen by every node (their read-back period plus the write's
// own): until then it counts as this node's commitment.
func (l *Ledger) SetVisibleAfter(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.visible = d
}

// SetShare sets this node's share of client's budget, in [0, 1] (1 or
// more: the whole budget, not shared).
func (l *Ledger) SetShare(client string, share float64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	if !(share < 1) {
		share = 0
	} else {
		share = max(share, 1e-9)
	}
	a.cluster.share = share
}

// Written records that amount of client's settled spend reached the
// shared store at now.
func (l *Ledger) Written(client string, amount pricing.Amount, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	a.cluster.pending = max(a.cluster.pending-amount, 0)
	if l.visible > 0 && amount > 0 {
		a.cluster.written = append(a.cluster.written, writtenSpend{at: now, amount: amount})
	}
	a.cluster.unseen(now, l.visible) // drops what every node sees by now
}

// Shared is a client's part of a shared budget at an instant.
type Shared struct {
	// Committed is what this node commits: its reservations in flight
	// plus its spend the others may not see yet.
	Committed pricing.Amount
	// Refused is the running sum of the needs refused by the share.
	Refused pricing.Amount
	// Using is the largest share of a window's remainder Committed
	// takes, in [0, 1].
	Using float64
	// Share is this node's share of the budget (1: the whole, not
	// shared).
	Share float64
}

// Shared returns client's part of its shared budget at now.
func (l *Ledger) Shared(client string, now time.Time) Shared {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.get(client, now)
	unseen := a.cluster.unseen(now, l.visible)
	s := Shared{Committed: a.reserved + unseen, Refused: a.cluster.refused, Share: 1}
	if a.cluster.share > 0 {
		s.Share = a.cluster.share
	}
	for _, w := range Windows {
		limit := a.limits.of(w)
		if limit <= 0 {
			continue
		}
		rest := limit - max(a.spent[idx(w)]-unseen, 0) - a.held
		switch {
		case rest <= 0 && s.Committed > 0:
			s.Using = 1
		case rest > 0:
			s.Using = max(s.Using, min(float64(s.Committed)/float64(rest), 1))
		}
	}
	return s
}

// checkShare is Reserve's check of a shared budget: nil when need fits
// this node's share in every window. l.mu is held.
func (l *Ledger) checkShare(client string, a *account, need pricing.Amount, now time.Time) *ExceededError {
	c := &a.cluster
	if c.share == 0 {
		return nil
	}
	unseen := c.unseen(now, l.visible)
	for _, w := range Windows {
		limit := a.limits.of(w)
		if limit <= 0 {
			continue
		}
		rest := limit - max(a.spent[idx(w)]-unseen, 0) - a.held
		if float64(a.reserved+unseen+need) <= c.share*float64(rest) {
			continue
		}
		c.refused += need
		return &ExceededError{Client: client, Window: w, Limit: limit, Used: a.spent[idx(w)] + a.reserved + a.held, Need: need,
			ResetsAt: a.resetsAt(w), Pending: true, Share: c.share}
	}
	return nil
}
