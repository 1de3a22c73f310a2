package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// ClusterLoad returns the upstream's load for a cluster sync. With a key
// pool the figures are the pool's: debits and capacity summed over its keys
// (the cluster grants one share, applied to every key alike), and the
// pause is the pool's as a whole: the earliest end among its keys' pauses,
// zero while any key is not paused (one key's 429 pauses that key alone on
// this node; the others' own 429s pause it there).
func (d *Dispatcher) ClusterLoad() flow.ClusterLoad {
	now := d.clk.Now()
	l := flow.ClusterLoad{
		Weights:        d.cfg.weights(),
		MaxConcurrency: d.cfg.Limits.MaxConcurrency,
	}
	first := true
	for _, lim := range d.limiters() {
		lvl, secs := lim.Cluster().BurstFill(now)
		if secs == 0 {
			continue
		}
		if first || lvl < l.BurstLevel {
			l.BurstLevel = lvl
		}
		if first || secs < l.BurstSeconds {
			l.BurstSeconds = secs
		}
		first = false
	}
	for i, k := range d.keys {
		l.Debited = l.Debited.Add(k.lim.Cluster().Debited())
		for dim, v := range k.lim.Cluster().BurstDepth() {
			l.BurstDepth[dim] += v
		}
		share := k.lim.Cluster().Share()
		for dim, b := range k.lim.State(now) {
			l.Capacity[dim] += b.Capacity / share
		}
		p := k.lim.PausedUntil()
		if i == 0 || p.Before(l.PausedUntil) {
			l.PausedUntil = p
		}
	}
	l.Breaker, l.BreakerOpenUntil = d.brk.State(now)
	d.mu.Lock()
	var prev flow.Amount
	for c := range llm.NumPriorities {
		cum := d.sched.Demand(llm.Priority(c))
		l.Queued[c] = cum.Sub(prev)
		prev = cum
		l.QueuedCount[c] = d.sched.LenClass(llm.Priority(c))
	}
	l.InFlight = d.inflight
	l.UrgentDebited = d.urgentDebited
	d.mu.Unlock()
	return l
}

// SetClusterShare makes the dispatcher use share (in (0, 1]) of its
// upstream's quota and at most slots requests in flight (slots < 0: no
// cluster cap), as granted by the cluster (flow.ClusterShare.SetShare,
// flow.AIMD.SetShare), and wakes the admission loop. It returns the
// fraction of the burst the change dropped (the least over the pool's
// bucket sets), which the cluster takes back into its burst pool.
func (d *Dispatcher) SetClusterShare(share float64, slots int) (dropped float64) {
	now := d.clk.Now()
	for i, lim := range d.limiters() {
		dr := lim.Cluster().SetShare(share, now)
		if i == 0 || dr < dropped {
			dropped = dr
		}
	}
	d.aimd.SetShare(slots)
	d.kick()
	return dropped
}

// CreditCluster adds f of the whole burst to every bucket set of the pool
// (flow.ClusterShare.Credit, capped at this node's depth), as granted out of
// the cluster's burst pool, and wakes the admission loop.
func (d *Dispatcher) CreditCluster(f float64) {
	if !(f > 0) {
		return
	}
	now := d.clk.Now()
	for _, lim := range d.limiters() {
		lim.Cluster().Credit(f, now)
	}
	d.kick()
}

// ApplyPause pauses the upstream (every key of its pool) until until, as
// another node of the cluster was told by RATE 429s. An earlier instant
// than a key's current pause is ignored for that key.
func (d *Dispatcher) ApplyPause(until time.Time) {
	now := d.clk.Now()
	if !until.After(now) {
		return
	}
	changed := false
	for _, k := range d.keys {
		if until.After(k.lim.PausedUntil()) {
			k.lim.Pause(until, now)
			changed = true
		}
	}
	if changed {
		d.kick()
	}
}

// limiters returns every bucket set of the pool: each key's and each
// org's (once).
func (d *Dispatcher) limiters() []*flow.Limiter {
	out := make([]*flow.Limiter, 0, len(d.keys))
	seen := map[*orgBucket]bool{}
	for _, k := range d.keys {
		out = append(out, k.lim)
		if k.org != nil && !seen[k.org] {
			seen[k.org] = true
			out = append(out, k.org.lim)
		}
	}
	return out
}

// ApplyClusterBreaker applies the cluster's shared breaker: openUntil is
// the shared opening (zero: closed cluster-wide) and probe whether this
// node holds the cluster's probe token. While an opening is shared, the
// local breaker opens until it (flow.Breaker.OpenUntil) and, past it,
// probes only with the token (flow.Breaker.SetProbeLimit). When the
// opening is cleared (another node's probes succeeded), a breaker whose
// outage began before since is closed; since zero never closes (a node on
// its fallback runs its own breaker).
func (d *Dispatcher) ApplyClusterBreaker(openUntil time.Time, probe bool, since time.Time) {
	now := d.clk.Now()
	switch {
	case openUntil.IsZero():
		d.brk.SetProbeLimit(-1)
		if st, _ := d.brk.State(now); st != flow.Closed && !since.IsZero() && d.brk.OutageSince().Before(since) {
			d.brk.Reset(now)
		}
	case probe:
		d.brk.SetProbeLimit(-1)
		d.brk.OpenUntil(openUntil, now)
	default:
		d.brk.SetProbeLimit(0)
		d.brk.OpenUntil(openUntil, now)
	}
	d.kick()
}

// noteAdmitted counts w's estimate as reserved in flight and, for an
// urgent class, in the urgent use a cluster keeps room for. d.mu held.
func (d *Dispatcher) noteAdmitted(w *waiter) {
	d.reserved = d.reserved.Add(w.cost)
	if w.item.Class <= llm.High {
		d.urgentDebited = d.urgentDebited.Add(w.cost)
	}
}
