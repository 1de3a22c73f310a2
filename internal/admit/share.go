package admit

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/flow"
)

// Per-client limits on a cluster (docs/cluster.md, "Per-client limits and
// budgets"): each (client, upstream) pair with limits is a tenant of the
// cluster (cluster.Tenants, key cluster.ClientKey), joined when its gate
// is first made. Its share of the pair's limits goes to the gate's
// flow.Limiter (SetShare: rate and depth, as an upstream's share does)
// and its slots to the gate's slotGate, so the nodes together admit at
// most the client's requests_per_minute / tokens_per_minute (plus one
// depth) and max_concurrency. Its demand is the rate at which the client
// asks this node: what the gate admitted plus what it refused or held
// back, as a share of the limit.

// clientShares are this node's (client, upstream) tenants.
type clientShares struct {
	tenants *cluster.Tenants
	clock   clock.Clock
	timeout time.Duration // bounds a first join's sync

	mu sync.Mutex
	m  map[gateKey]*clientShare
}

func newClientShares(t *cluster.Tenants, c clock.Clock, timeout time.Duration) *clientShares {
	return &clientShares{tenants: t, clock: c, timeout: timeout, m: map[gateKey]*clientShare{}}
}

// join returns the pair's tenant, joined (synced once) the first time
// and again after it left for being idle (cluster.TenantIdleAfter).
// Called at every use; at once while it is joined.
func (cs *clientShares) join(client, upstream string, v LimitValues) *clientShare {
	k := gateKey{client, upstream}
	cs.mu.Lock()
	sh := cs.m[k]
	if sh != nil && cs.tenants.Has(sh.key) {
		cs.mu.Unlock()
		return sh
	}
	if sh == nil {
		sh = &clientShare{key: cluster.ClientKey(client, upstream), clock: cs.clock}
		cs.m[k] = sh
	}
	cs.mu.Unlock()
	sh.mu.Lock()
	if sh.gate == nil {
		sh.joining = v
	}
	sh.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cs.timeout)
	defer cancel()
	cs.tenants.Join(ctx, sh) // at once when joined already
	return sh
}

// granted returns the pair's last grant (0, 0 before the first).
func (cs *clientShares) granted(k gateKey) (share float64, slots int) {
	cs.mu.Lock()
	sh := cs.m[k]
	cs.mu.Unlock()
	if sh == nil {
		return 0, 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.share, sh.slots
}

// clientShare is one (client, upstream) pair as a cluster.Tenant. It
// applies its grant to the pair's current gate (a reload that changes
// the limits makes a new gate; the old one's requests finish with it).
type clientShare struct {
	key   string
	clock clock.Clock

	mu      sync.Mutex
	joining LimitValues // the limits of the gate about to be made (before the first)
	gate    *Gate
	granted bool
	share   float64
	slots   int
	prev    flow.Amount // the gate's asked at the last measure
	prevAt  time.Time
	demand  float64 // the last measure
}

// clientDemandWindow is the shortest time a demand is measured over: a
// sync sooner after the last measure reports that measure again, so a
// client's share does not follow the noise of a bursty sliver of time
// (each cut drops the tokens above the new depth, which for a small
// limit is the progress toward its next request).
const clientDemandWindow = time.Second

func (c *clientShare) Key() string { return c.key }

// asked is what the gate was asked: admitted plus refused or held back.
func (g *Gate) asked() flow.Amount {
	var a flow.Amount
	if g.lim != nil {
		a = g.lim.Cluster().Debited()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return a.Add(g.refused)
}

// Load implements cluster.Tenant: the share of the pair's limits the
// client asked this node for since the last sync (the busier of requests
// and tokens), and its slots.
func (c *clientShare) Load(now time.Time) cluster.TenantLoad {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gate
	if g == nil {
		// Joining: a request is about to use the pair.
		return cluster.TenantLoad{SlotDemand: 1, MaxSlots: c.joining.MaxConcurrency}
	}
	var l cluster.TenantLoad
	if dt := now.Sub(c.prevAt); dt >= clientDemandWindow {
		asked := g.asked()
		c.demand = 0
		for _, r := range [...]struct {
			d     flow.Dim
			limit float64
		}{{flow.Requests, g.values.RequestsPerMinute}, {flow.Tokens, g.values.TokensPerMinute}} {
			if r.limit > 0 {
				c.demand = max(c.demand, (asked[r.d]-c.prev[r.d])/(r.limit/60*dt.Seconds()))
			}
		}
		c.prev, c.prevAt = asked, now
	}
	l.Demand = c.demand
	if g.slots != nil {
		l.Slots, l.SlotDemand, l.MaxSlots = g.slots.load()
	}
	// Idle by the last measure (a gate just made is not: it is measured
	// within clientDemandWindow, far within cluster.TenantIdleAfter).
	l.Idle = l.Demand == 0 && l.SlotDemand == 0
	return l
}

// Apply implements cluster.Tenant.
func (c *clientShare) Apply(gr cluster.TenantGrant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.granted, c.share, c.slots = true, gr.Share, gr.Slots
	if c.gate != nil {
		c.gate.applyShare(c.share, c.slots, c.clock.Now())
	}
}

// attach makes g the pair's current gate, at the share last granted: a
// new gate's buckets start full, so it starts with its share of the
// burst.
func (c *clientShare) attach(g *Gate, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gate, c.prev, c.prevAt = g, flow.Amount{}, now
	if c.granted {
		g.applyShare(c.share, c.slots, now)
	}
}

// applyShare applies a cluster grant to the gate.
func (g *Gate) applyShare(share float64, slots int, now time.Time) {
	if g.lim != nil {
		g.lim.Cluster().SetShare(share, now)
	}
	if g.slots != nil {
		g.slots.setCap(slots)
	}
}
