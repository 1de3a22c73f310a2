package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
)

// Memory is a Backend held in one process, on a Clock: the nodes of a
// test share one Memory to run a cluster on a fake clock through the real
// dispatchers. It passes the same conformance suite as the stores (one
// lock stands for their atomic step) and announces signals to Listen like
// they do.
type Memory struct {
	clk clock.Clock

	mu      sync.Mutex
	leases  map[string]map[string]Lease // key → node → lease
	signals map[string]signals
	leaders map[string]Lease                         // name → holder (Node, ExpiresAt)
	learned map[string]map[string]flow.ClusterReport // key → account/dim → record (learned.go)
	subs    map[chan string]struct{}
}

// NewMemory returns an empty Memory on clk (nil: the wall clock).
func NewMemory(clk clock.Clock) *Memory {
	return &Memory{clk: clock.Or(clk), leases: map[string]map[string]Lease{}, signals: map[string]signals{},
		leaders: map[string]Lease{}, subs: map[chan string]struct{}{}}
}

// Sync implements Backend.
func (m *Memory) Sync(ctx context.Context, r Report) (Grant, error) {
	if err := r.validate(); err != nil {
		return Grant{}, err
	}
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	ls := m.leases[r.Key]
	if ls == nil {
		ls = map[string]Lease{}
		m.leases[r.Key] = ls
	}
	for node, l := range ls {
		if l.ExpiresAt.Before(now) {
			delete(ls, node)
		}
	}
	if cur, ok := ls[r.Node]; ok && cur.Incarnation != r.Incarnation {
		if r.Renew {
			return Grant{}, &DuplicateError{Key: r.Key, Node: r.Node, Incarnation: cur.Incarnation}
		}
		// A takeover: the lease is kept aside until it expires.
		cur.Node = asideNode(r.Node, cur.Incarnation)
		ls[cur.Node] = cur
		delete(ls, r.Node)
	}
	v := poolView{fresh: len(ls) == 0, since: -1}
	for _, l := range ls {
		v.held += l.Share
	}
	// Our own leases kept aside or under our former id (held until now,
	// so counted above): this report holds what we apply now.
	for _, n := range ownFormer(r) {
		if l, ok := ls[n]; ok && l.Incarnation == r.Incarnation {
			delete(ls, n)
		}
	}
	if old, ok := ls[r.Node]; ok {
		v.since = now.Sub(old.ExpiresAt.Add(-r.TTL))
	}
	ls[r.Node] = Lease{Node: r.Node, Incarnation: r.Incarnation, Share: r.Share, Demand: r.Demand, Slots: r.Slots, SlotDemand: r.SlotDemand, ExpiresAt: now.Add(r.TTL)}
	var g Grant
	for _, l := range ls {
		g.Leases = append(g.Leases, l)
	}
	g.Share, g.Slots = Allocate(g.Leases, r.Node, r.MaxSlots)
	me := ls[r.Node]
	me.Share, me.Slots = max(g.Share, r.Share), max(g.Slots, r.Slots)
	ls[r.Node] = me
	for i := range g.Leases {
		if g.Leases[i].Node == r.Node {
			g.Leases[i] = me
		}
	}
	sortLeases(g.Leases)
	next, announce := m.signals[r.Key].step(r, now)
	var learnedChanged bool
	next.Pool, g.Credit = next.Pool.step(r, v, g.Share, now)
	g.Pool = next.Pool.Level
	m.signals[r.Key] = next
	g.PausedUntil, g.BreakerOpenUntil, g.Probe = next.PausedUntil, next.OpenUntil, next.ProbeNode == r.Node
	g.Learned, learnedChanged = m.learnedStep(r)
	if announce || learnedChanged {
		for ch := range m.subs {
			select {
			case ch <- r.Key:
			default: // a busy listener catches up at its next sync
			}
		}
	}
	return g, nil
}

// Leave implements Backend.
func (m *Memory) Leave(_ context.Context, key, node, incarnation string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := m.leases[key]
	for _, n := range []string{node, asideNode(node, incarnation)} {
		if l, ok := ls[n]; ok && l.Incarnation == incarnation {
			delete(ls, n)
		}
	}
	return nil
}

// Lead implements Backend.
func (m *Memory) Lead(_ context.Context, name, node, incarnation string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	cur, ok := m.leaders[name]
	if ok && cur.Incarnation != incarnation && !cur.ExpiresAt.Before(now) {
		return false, nil
	}
	m.leaders[name] = Lease{Node: node, Incarnation: incarnation, ExpiresAt: now.Add(ttl)}
	return true, nil
}

// Close implements Backend.
func (m *Memory) Close() error { return nil }

// Listen implements Listener.
func (m *Memory) Listen(ctx context.Context, changed func(key string)) {
	ch := make(chan string, 64)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.subs, ch)
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-ch:
			changed(key)
		}
	}
}
