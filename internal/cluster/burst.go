package cluster

import (
	"math"
	"time"
)

// burstPool is a key's burst pool as stored: Level is the part of the
// provider's burst (a fraction of its whole depth, in [0, 1]) that no
// node's bucket holds and that may still be granted, as of At.
//
// Why it is sound. Let B be the provider's bucket and L_i the nodes'
// levels (their usable tokens), and S = B − ΣL_i the slack: what the
// provider holds that no node does. The nodes' buckets are capped at
// their share of the depth and refill at their share of the rate, and the
// shares held sum to at most 1 (Allocate), so S ≥ 0 at all times: when
// B is full, ΣL_i ≤ Σ shares × depth ≤ B; below full, B refills at the
// whole rate, at least as fast as the nodes' buckets together. A credit
// f raises a node's level by f (capped at its own depth) and so lowers S
// by at most f; a node that lowers its share and drops δ of its tokens
// raises S by δ; and S falls, at most, as fast as the nodes' buckets
// refill: Σ held shares / BurstSeconds of the whole depth per second.
// The pool keeps Level ≤ S by following the same three moves, each on
// the safe side:
//
//   - it is full (1) only when a node that has just started syncs a key
//     with no unexpired lease: nobody else holds tokens and the provider's
//     bucket is assumed full, the assumption a single node makes when it
//     starts;
//   - it decays at Σ held shares / BurstSeconds per second (the held
//     shares of the unexpired leases, which bound what each node applies);
//   - a node's dropped tokens come back at its next sync, less a decay of
//     1/BurstSeconds per second since its previous sync (the drop
//     happened after it, while S fell by at most that much), and only
//     when that previous lease is still unexpired;
//   - a grant never exceeds Level.
//
// So Σ credits never exceed what the provider holds beyond the nodes'
// buckets, and the cluster emits at most rate·t + depth over any window,
// as without credits. Once Level is 0 the credits stop until the next
// drop or the next fresh start.
type burstPool struct {
	Level float64
	At    time.Time
}

// poolView is what a sync knows of a key's leases before this node's
// lease is renewed.
type poolView struct {
	// held is the sum of the shares held by the unexpired leases over the
	// interval since At: the others' and this node's previous lease.
	held float64
	// fresh says no lease of the key was unexpired (this node's included).
	fresh bool
	// since is how long ago this node's previous lease was renewed
	// (negative: it had no unexpired lease).
	since time.Duration
}

// step applies a sync to the pool at now (the store's clock) and returns
// the pool after it and the credit granted to the node, whose new share
// is share. The Redis script does the same in Lua.
func (p burstPool) step(r Report, v poolView, share float64, now time.Time) (burstPool, float64) {
	secs, was := r.BurstSeconds, p.Level
	if !p.At.IsZero() && now.After(p.At) {
		if secs > 0 {
			p.Level -= now.Sub(p.At).Seconds() / secs * v.held
		} else {
			p.Level = 0 // limits unknown: nothing to decay by, spend nothing
		}
	}
	p.Level = math.Max(p.Level, 0)
	if v.fresh && r.Starting {
		p.Level = 1
	}
	if r.Returned > 0 && v.since >= 0 && secs > 0 {
		p.Level += math.Max(0, r.Returned-v.since.Seconds()/secs)
	}
	p.Level = math.Min(p.Level, 1)
	credit := math.Max(0, math.Min(math.Min(p.Level, r.Backlog), share-r.Level))
	p.Level -= credit
	if p.Level > 0 || was > 0 {
		p.At = now
	} // else: an empty pool stays as it was stored (nothing to write back)
	return p, credit
}
