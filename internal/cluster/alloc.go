package cluster

import (
	"math"
	"slices"
)

// FloorShareMax is the most of the quota a node is guaranteed whatever its
// demand, so a request arriving at an idle node is admitted at once (out
// of the floor's depth) rather than after the next sync; with n nodes the
// floor is min(FloorShareMax, 1/(2n)).
const FloorShareMax = 0.05

// Hysteresis is the relative cut below which a node keeps its share.
const Hysteresis = 0.1

// floor is each node's guaranteed share among n.
func floor(n int) float64 {
	if n <= 0 {
		return 1
	}
	return math.Min(FloorShareMax, 1/(2*float64(n)))
}

// Allocate computes the grant for self given every unexpired lease of its key
// (self's included, already holding the share it reported). The target of
// each node is its floor plus the rest in proportion to demand (equal
// shares when nobody has any), plus, for a node with demand, what no
// node's target nor holding claims; and of slots one each (when there are at
// least as many as nodes) plus the rest in proportion to slot demand;
// self is granted its target but never more than the others leave, so the shares held never sum above 1 (and the
// slots never above maxSlots). Both backends run this same computation
// (the Redis one in Lua), inside their atomic step.
func Allocate(leases []Lease, self string, maxSlots int) (share float64, slots int) {
	n := len(leases)
	var demand, slotDemand, othersShare float64
	othersSlots := 0
	var me *Lease
	for i := range leases {
		l := &leases[i]
		demand += l.Demand
		slotDemand += l.SlotDemand
		if l.Node == self {
			me = l
			continue
		}
		othersShare += l.Share
		othersSlots += l.Slots
	}
	if me == nil || n == 0 {
		return 0, 0
	}
	fl := floor(n)
	targetOf := func(l *Lease) float64 {
		if demand > 0 {
			return fl + (1-fl*float64(n))*l.Demand/demand
		}
		return 1 / float64(n)
	}
	target := targetOf(me)
	// What the others lack of their targets beyond what is free, and what
	// nobody's target nor holding claims (the targets are computed at each
	// node's own sync, from demands that move in between, so they need not
	// sum to 1): a node with demand takes that surplus rather than leave
	// the quota idle.
	short := -(1 - othersShare - me.Share)
	claimed := max(me.Share, target)
	for i := range leases {
		if l := &leases[i]; l.Node != self {
			short += max(0, targetOf(l)-l.Share)
			claimed += max(l.Share, targetOf(l))
		}
	}
	if me.Demand > 0 && claimed < 1 {
		target += 1 - claimed
	}
	if target < me.Share && target > me.Share*(1-Hysteresis) && short <= 1e-9 {
		// A small cut is not worth its cost (the tokens above the new
		// depth are dropped): keep the share until the target moves more,
		// unless another node is short of its target (a node whose
		// critical work grows must not wait for a 10% swing).
		target = me.Share
	}
	share = math.Max(0, math.Min(target, 1-othersShare))
	if maxSlots > 0 {
		want := maxSlots / n
		switch {
		case slotDemand > 0 && maxSlots >= n:
			// A slot each, so a request arriving at an idle node is not
			// held back by the others' queues; the rest by demand.
			want = 1 + int(math.Floor(float64(maxSlots-n)*me.SlotDemand/slotDemand))
		case slotDemand > 0:
			want = int(math.Floor(float64(maxSlots) * me.SlotDemand / slotDemand))
		}
		if me.SlotDemand > 0 || slotDemand == 0 {
			want = max(want, 1)
		}
		slots = max(0, min(want, maxSlots-othersSlots))
	}
	return share, slots
}

// sortLeases orders leases by node, for stable answers.
func sortLeases(ls []Lease) {
	slices.SortFunc(ls, func(a, b Lease) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
}
