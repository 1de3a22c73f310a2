package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// Tenants shares per-client quotas across the cluster: a client's limits
// on an upstream (ClientKey) and its spend budget (BudgetKey). Each is a
// key of the same shared state as an upstream's quota, synced through the
// same Backend.Sync and split by the same Allocate: every node serving
// the client holds an expiring lease on a share of the client's limit (and
// of its max_concurrency), sized from its demand, and the shares held
// never sum above 1. A node that alone serves a client is granted all of
// it.
//
// Unlike an upstream (a Member of Node), a tenant is made on first use
// (Join syncs it once before its first request), has no pause and no
// breaker, and its demand is measured by its owner. Every joined tenant
// is synced every SyncInterval: one store round trip per tenant per
// interval. One idle for TenantIdleAfter (TenantLoad.Idle at every sync)
// leaves: it applies a zero share, gives its lease back and is forgotten,
// so a node pays only for the clients it serves; its owner joins it again
// at its next use. When the store cannot be reached for a lease's life, a
// tenant falls back to 1/N (N the node count it last saw), like an
// upstream.
type Tenants struct {
	cfg     Config
	id      *Identity
	backend Backend
	clk     clock.Clock
	log     *slog.Logger

	life lifecycle.Base // Start and Stop; runs the syncs

	mu      sync.Mutex
	tenants map[string]*tenantState
	lastErr error
}

// TenantIdleAfter is how long a tenant reports Idle before it leaves.
const TenantIdleAfter = 2 * time.Minute

// Tenant is one per-client quota as the cluster sees it.
type Tenant interface {
	// Key is its shared-state key (ClientKey, BudgetKey).
	Key() string
	// Load returns its load for one sync. It is called once per sync, so
	// it may measure what happened since the previous call.
	Load(now time.Time) TenantLoad
	// Apply applies a grant (or the fallback share).
	Apply(g TenantGrant)
}

// TenantLoad is what a tenant reports at a sync.
type TenantLoad struct {
	// Demand is its demand on the key, >= 0, in a unit every node uses
	// alike for that key (Allocate splits by its ratios).
	Demand float64
	// Using is the share of the key it uses now whatever its grant, in
	// [0, 1]: a budget's commitments, which a lower grant cannot take
	// back. The lease reports the larger of it and the share applied, so
	// another node is never granted what this one still uses.
	Using float64
	// SlotDemand, Slots and MaxSlots are as in Report: its concurrency
	// demand, the slots it holds now (cap or in flight, the larger) and
	// the client's cluster-wide max_concurrency (0: none).
	SlotDemand float64
	Slots      int
	MaxSlots   int
	// Idle says nothing is asked, in flight or committed: the tenant may
	// leave (TenantIdleAfter) and be joined again at its next use.
	Idle bool
}

// TenantGrant is what a tenant applies.
type TenantGrant struct {
	// Share of the key's limit, in [0, 1].
	Share float64
	// Slots is its concurrency cap; < 0 uncapped (no MaxSlots).
	Slots int
	// Nodes is how many nodes held an unexpired lease on the key, this one
	// included.
	Nodes int
	// Fallback says the store could not be reached: Share is 1/Nodes.
	Fallback bool
}

type tenantState struct {
	t      Tenant
	joined chan struct{} // closed once the first sync is applied
	syncMu sync.Mutex    // one sync of a tenant at a time
	// guarded by syncMu
	share    float64
	slots    int
	nodes    int
	lastOK   time.Time
	fallback bool
	handover time.Time // until then, back from the fallback, its share and slots are kept (Node's handover)
	idleFrom time.Time // zero: not idle at the last sync
	written  written   // this incarnation's lease on the key (Identity)
}

// ClientKey is the shared-state key of a client's limits on an upstream.
func ClientKey(client, upstream string) string { return "client:" + client + "/" + upstream }

// BudgetKey is the shared-state key of a client's spend budget.
func BudgetKey(client string) string { return "budget:" + client }

// NewTenants returns a Tenants syncing through backend, with Node's Config
// (the sync interval and lease TTL) under id, the Node's identity (nil:
// one of its own under cfg.NodeID).
func NewTenants(cfg Config, id *Identity, backend Backend, clk clock.Clock, log *slog.Logger) (*Tenants, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	clk = clock.Or(clk)
	if id == nil {
		id = NewIdentity(cfg.NodeID, clk.Now(), log)
	}
	return &Tenants{cfg: cfg, id: id, backend: backend, clk: clk, log: log, tenants: map[string]*tenantState{}}, nil
}

// Identity returns the identity the tenants sync under.
func (ts *Tenants) Identity() *Identity { return ts.id }

// Join adds t and syncs it once, so that it starts with its grant (or its
// fallback); a key already joined is not synced again (Join waits for its
// first sync). Safe for concurrent use.
func (ts *Tenants) Join(ctx context.Context, t Tenant) {
	ts.mu.Lock()
	st, ok := ts.tenants[t.Key()]
	if !ok {
		st = &tenantState{t: t, slots: -1, joined: make(chan struct{})}
		ts.tenants[t.Key()] = st
		// Held until the first sync is applied.
		st.syncMu.Lock()
	}
	ts.mu.Unlock()
	if ok {
		// The first sync, if it is still under way: bounded by its own
		// store call's timeout, and it always applies a grant or the
		// fallback, so a tenant is never used before either.
		<-st.joined
		return
	}
	ts.syncLocked(ctx, st)
	close(st.joined)
	st.syncMu.Unlock()
}

// Start syncs every joined tenant every SyncInterval until Stop
// (lifecycle.Base: a second Start answers lifecycle.ErrStarted, a Start
// after Stop lifecycle.ErrStopped).
func (ts *Tenants) Start(ctx context.Context) error {
	err := ts.life.Start(ctx, func(run context.Context) error {
		ts.life.Go(func() {
			t := ts.clk.NewTimer(ts.cfg.SyncInterval)
			defer t.Stop()
			for {
				select {
				case <-run.Done():
					return
				case <-t.C():
				}
				ts.SyncAll(run)
				t.Reset(ts.cfg.SyncInterval)
			}
		})
		return nil
	})
	if err != nil {
		return fmt.Errorf("starting cluster tenants: %w", err)
	}
	return nil
}

// Stop ends the syncs and gives every lease back. Idempotent; safe before
// Start.
func (ts *Tenants) Stop(ctx context.Context) error {
	err := ts.life.Stop(ctx, func(ctx context.Context) error {
		// The syncs end first, so that none renews a lease given back.
		if err := ts.life.Halt(ctx); err != nil {
			return err
		}
		ts.mu.Lock()
		all := make([]*tenantState, 0, len(ts.tenants))
		for _, st := range ts.tenants {
			all = append(all, st)
		}
		ts.mu.Unlock()
		lctx, cancelLeave := context.WithTimeout(ctx, ts.timeout())
		defer cancelLeave()
		var errs []error
		for _, st := range all {
			st.syncMu.Lock()
			w := st.written
			st.syncMu.Unlock()
			if w.gen != 0 {
				errs = append(errs, ts.backend.Leave(lctx, st.t.Key(), w.node, ts.id.incStr))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return fmt.Errorf("stopping cluster tenants: %w", err)
	}
	return nil
}

func (ts *Tenants) timeout() time.Duration {
	return max(ts.cfg.SyncInterval, ts.cfg.LeaseTTL/3)
}

// SyncAll syncs every joined tenant once (the loop's step).
func (ts *Tenants) SyncAll(ctx context.Context) {
	ts.mu.Lock()
	all := make([]*tenantState, 0, len(ts.tenants))
	for _, st := range ts.tenants {
		all = append(all, st)
	}
	ts.mu.Unlock()
	for _, st := range all {
		st.syncMu.Lock()
		idle := ts.syncLocked(ctx, st)
		st.syncMu.Unlock()
		if idle {
			ts.leaveIdle(ctx, st)
		}
	}
}

// leaveIdle drops an idle tenant: a zero share applied first, then its
// lease given back, then forgotten, all under ts.mu so that a Join of the
// same key waits and then starts afresh.
func (ts *Tenants) leaveIdle(ctx context.Context, st *tenantState) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tenants[st.t.Key()] != st {
		return
	}
	st.syncMu.Lock()
	defer st.syncMu.Unlock()
	st.share, st.slots = 0, 0
	st.t.Apply(TenantGrant{Share: 0, Slots: 0, Nodes: st.nodes})
	if st.written.gen != 0 {
		lctx, cancel := context.WithTimeout(ctx, ts.timeout())
		err := ts.backend.Leave(lctx, st.t.Key(), st.written.node, ts.id.incStr)
		cancel()
		if err != nil {
			// The lease expires after its TTL anyway; nothing is held here.
			ts.log.Debug("leaving an idle client's share", "key", st.t.Key(), "err", err)
		}
	}
	st.written = written{}
	delete(ts.tenants, st.t.Key())
}

// Has reports whether key is joined (and its first sync applied): a
// caller on the request path asks it before Join, which may sync.
func (ts *Tenants) Has(key string) bool {
	ts.mu.Lock()
	st, ok := ts.tenants[key]
	ts.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-st.joined:
		return true
	default:
		return false
	}
}

// syncLocked syncs one tenant and applies its grant, and reports whether
// it has been idle for TenantIdleAfter; st.syncMu is held.
func (ts *Tenants) syncLocked(ctx context.Context, st *tenantState) bool {
	start := ts.clk.Now()
	l := st.t.Load(start)
	switch {
	case !l.Idle:
		st.idleFrom = time.Time{}
	case st.idleFrom.IsZero():
		st.idleFrom = start
	case start.Sub(st.idleFrom) >= TenantIdleAfter:
		return true
	}
	held := max(st.slots, 0)
	r := Report{
		Key:        st.t.Key(),
		Demand:     finite(l.Demand),
		Share:      max(st.share, min(max(finite(l.Using), 0), 1)),
		SlotDemand: finite(l.SlotDemand),
		Slots:      max(held, l.Slots),
		MaxSlots:   max(l.MaxSlots, 0),
		TTL:        ts.cfg.LeaseTTL,
	}
	// On the fallback and in the handover after it, the fallback's share
	// is reported as held, like an upstream's (Node.syncOne).
	sctx, cancel := context.WithTimeout(ctx, ts.timeout())
	g, err := ts.id.sync(sctx, ts.backend, r, &st.written, start)
	cancel()
	ts.mu.Lock()
	ts.lastErr = err
	ts.mu.Unlock()
	if err != nil {
		if !st.fallback && start.Sub(st.lastOK) >= ts.cfg.LeaseTTL-ts.cfg.SyncInterval {
			n := fallbackNodes(st.nodes, st.lastOK, ts.cfg.ExpectedNodes)
			st.fallback, st.share, st.slots, st.handover = true, 1/float64(n), -1, time.Time{}
			if l.MaxSlots > 0 {
				st.slots = max(l.MaxSlots/n, 1)
			}
			st.t.Apply(TenantGrant{Share: st.share, Slots: st.slots, Nodes: n, Fallback: true})
			ts.log.Warn("cluster store unreachable: a client's limit falls back to a local share", "key", r.Key, "share", st.share, "err", err)
		}
		return false
	}
	if st.fallback {
		// The handover, as for an upstream's quota (Node.syncOne): the
		// fallback's share is kept for a lease's life, neither lowered
		// (the client's requests here would wait for the nodes back
		// sooner to lower) nor raised (the nodes still on their fallback
		// hold theirs where the store cannot see it).
		st.handover = start.Add(ts.cfg.LeaseTTL)
		ts.log.Info("cluster store reachable again: the client's limit is shared again after a handover", "key", r.Key)
	}
	st.fallback, st.lastOK, st.nodes = false, start, len(g.Leases)
	if start.Before(st.handover) {
		return false
	}
	st.share, st.slots = g.Share, g.Slots
	if l.MaxSlots == 0 {
		st.slots = -1
	}
	st.t.Apply(TenantGrant{Share: st.share, Slots: st.slots, Nodes: st.nodes})
	return false
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return max(f, 0)
}

// TenantStatus is one tenant's share, for /v1/status.
type TenantStatus struct {
	Key      string
	Share    float64
	Slots    int
	Nodes    int
	Fallback bool
}

// Status lists the joined tenants (in no order) and the last sync error.
func (ts *Tenants) Status() ([]TenantStatus, error) {
	ts.mu.Lock()
	all := make([]*tenantState, 0, len(ts.tenants))
	for _, st := range ts.tenants {
		all = append(all, st)
	}
	err := ts.lastErr
	ts.mu.Unlock()
	out := make([]TenantStatus, 0, len(all))
	for _, st := range all {
		st.syncMu.Lock()
		out = append(out, TenantStatus{Key: st.t.Key(), Share: st.share, Slots: st.slots, Nodes: st.nodes, Fallback: st.fallback})
		st.syncMu.Unlock()
	}
	return out, err
}
