package cluster

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// BacklogHorizon is how soon a node would like to send what it has
// queued: a backlog counts as the rate that would drain it in this time.
const BacklogHorizon = 10 * time.Second

// Backlog is a member's queued cost as a fraction of its burst depth (the
// largest dimension): the most of the burst pool it is credited.
func Backlog(cur flow.ClusterLoad) float64 {
	var b float64
	for d, depth := range cur.BurstDepth {
		if depth <= 0 {
			continue
		}
		var q float64
		for c := range cur.Queued {
			q += cur.Queued[c][d]
		}
		b = math.Max(b, q/depth)
	}
	if math.IsNaN(b) || math.IsInf(b, 0) {
		return 0
	}
	return b
}

// classFactor is how much a class's backlog weighs against the least
// urgent's: the square of its weight ratio (8/4/2/1 gives 64/16/4/1), so
// a little critical work at one node outweighs a flood of low-priority
// work at another.
func classFactor(w [llm.NumPriorities]float64, c int) float64 {
	lo := math.Inf(1)
	for _, x := range w {
		if x > 0 {
			lo = math.Min(lo, x)
		}
	}
	if math.IsInf(lo, 1) || w[c] <= 0 {
		return 1
	}
	r := w[c] / lo
	return r * r
}

// UsedSmoothing is the time constant of the average of a member's used
// share (Used): over one sync interval a node sends a handful of
// requests, and a share measured on so few swings by half from one sync
// to the next, which would move the shares (and idle the capacity a
// lowered share holds until it is released) for nothing.
const UsedSmoothing = time.Second

// Used returns the share of its quota a member used over the last dt (the
// busiest dimension), averaged into prev with the time constant
// UsedSmoothing.
func Used(cur flow.ClusterLoad, prevDebited flow.Amount, dt time.Duration, prev float64) float64 {
	return usedOf(cur.Debited, cur.Capacity, prevDebited, dt, prev)
}

// UrgentUsed is Used for the urgent classes' part of the debits
// (flow.ClusterLoad.UrgentDebited).
func UrgentUsed(cur flow.ClusterLoad, prevUrgent flow.Amount, dt time.Duration, prev float64) float64 {
	return usedOf(cur.UrgentDebited, cur.Capacity, prevUrgent, dt, prev)
}

// usedOf is the smoothed share of capacity that debited grew by since
// prevDebited, over dt.
func usedOf(debited flow.Amount, capacity [flow.NumDims]float64, prevDebited flow.Amount, dt time.Duration, prev float64) float64 {
	if dt <= 0 {
		return prev
	}
	var used float64
	for d, c := range capacity {
		if c > 0 {
			used = math.Max(used, (debited[d]-prevDebited[d])/(c/60*dt.Seconds()))
		}
	}
	if math.IsNaN(used) || math.IsInf(used, 0) {
		return prev
	}
	a := 1 - math.Exp(-dt.Seconds()/UsedSmoothing.Seconds())
	return prev + a*(math.Max(used, 0)-prev)
}

// UrgentHeadroom is how much of its urgent classes' recent use a member
// asks for on top of that use (Demand): a share that refills exactly as
// fast as urgent requests spend it leaves its bucket empty when the next
// one comes, so each waits for refill; with twice its use the bucket
// stays full.
const UrgentHeadroom = 1.0

// Demand is a member's demand on its quota, in shares of it: the share it
// used lately (Used) with UrgentHeadroom of its urgent classes' part of it
// (urgent, UrgentUsed) on top, plus its class-weighted backlog as the
// share that would drain it within BacklogHorizon.
func Demand(cur flow.ClusterLoad, used, urgent float64) float64 {
	var backlog float64
	for c := range cur.Queued {
		var b float64
		for d, capa := range cur.Capacity {
			if capa > 0 {
				b = math.Max(b, cur.Queued[c][d]/(capa/60*BacklogHorizon.Seconds()))
			}
		}
		if b == 0 && cur.QueuedCount[c] > 0 {
			b = 1e-3 * float64(cur.QueuedCount[c]) // limits unknown: count requests
		}
		backlog += classFactor(cur.Weights, c) * b
	}
	d := math.Max(used, 0) + UrgentHeadroom*math.Max(urgent, 0) + backlog
	if math.IsNaN(d) || math.IsInf(d, 0) {
		return 0
	}
	return d
}

// SlotDemand is a member's demand for concurrency slots: its requests in
// flight plus its class-weighted queue.
func SlotDemand(cur flow.ClusterLoad) float64 {
	d := float64(cur.InFlight)
	for c, n := range cur.QueuedCount {
		d += classFactor(cur.Weights, c) * float64(n)
	}
	return d
}
