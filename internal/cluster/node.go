package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// Defaults of Config.
const (
	// SyncIntervalDefault is how often a node syncs each upstream's lease.
	SyncIntervalDefault = 500 * time.Millisecond
	// LeaseTTLDefault is how long a lease lives without a renewal: a dead
	// node's share comes back within it.
	LeaseTTLDefault = 3 * time.Second
	// PausePollDefault is how often a node looks for a new local pause to
	// publish at once, between syncs (no store round trip unless one).
	PausePollDefault = 50 * time.Millisecond
	// PoolClaimMin is the least part of the burst (in the key's burst
	// pool, and of room in a node's buckets) worth a sync at once when
	// demand appears between syncs.
	PoolClaimMin = 0.05
	// LeaderName is the leadership the store's maintenance runs under.
	LeaderName = "maintenance"
	// ExpectedNodesDefault is Config.ExpectedNodes: a node alone.
	ExpectedNodesDefault = 1
)

// StoreOff, as Config.Store, turns quota sharing off even on a
// PostgreSQL job store.
const StoreOff = "off"

// Config configures a Node: the gateway's cluster: section
// (docs/config.md), decoded from YAML. A zero field takes its default
// (WithDefaults); Validate names a bad field by its YAML path, without the
// "cluster." the gateway puts before it.
type Config struct {
	// Store is where the shared state lives: postgres://…, redis://… or
	// rediss://… (a key_prefix=… parameter names the keys' prefix,
	// RedisPrefixDefault otherwise), or StoreOff. The gateway opens it
	// (Open) and hands NewNode the Backend; a Node does not read it.
	// Defaults to the gateway's job store when that is PostgreSQL, else
	// off (the gateway's to decide).
	Store string `yaml:"store"`
	// NodeID names this node in the shared state, at most 200 characters.
	// Two processes must not share one: when they do, the younger takes
	// a fresh id (this one plus "-" and 6 random hex digits) and says so
	// (Identity). Defaults to hostname-pid-xxxxxx, with 6 random hex
	// digits drawn once per process, so containers that share a hostname
	// and a pid (1) still differ.
	NodeID string `yaml:"node_id"`
	// SyncInterval is how often each upstream's lease is renewed and its
	// share recomputed, at least 10ms. Defaults to 500ms
	// (SyncIntervalDefault).
	SyncInterval time.Duration `yaml:"sync_interval"`
	// LeaseTTL is how long a node's share outlives its last sync (a dead
	// node's share comes back within it), at least two sync intervals.
	// Defaults to 3s (LeaseTTLDefault).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// ExpectedNodes is how many nodes the cluster usually runs, at least
	// 1: a node that has never reached the store (it starts while the
	// store is down) serves on 1/ExpectedNodes of each quota and each
	// client's limit until it does; once it has synced, an outage falls
	// back to 1/N of the N nodes it last saw. Defaults to 1
	// (ExpectedNodesDefault: the node assumes it is alone).
	ExpectedNodes int `yaml:"expected_nodes"`
}

// WithDefaults fills the zero fields but Store. It is pure.
func (c Config) WithDefaults() Config {
	c.NodeID = cmp.Or(c.NodeID, defaultNodeID())
	c.SyncInterval = cmp.Or(c.SyncInterval, SyncIntervalDefault)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	c.ExpectedNodes = cmp.Or(c.ExpectedNodes, ExpectedNodesDefault)
	return c
}

// Validate reports the first invalid field of c once defaulted, named by
// its YAML path (e.g. "lease_ttl: must be at least twice sync_interval").
func (c Config) Validate() error {
	d := c.WithDefaults()
	switch {
	case d.Store != "" && d.Store != StoreOff && !isPostgres(d.Store) && !isRedis(d.Store):
		return fmt.Errorf("store: want postgres://…, redis://… or %q", StoreOff)
	case d.SyncInterval < 10*time.Millisecond:
		return fmt.Errorf("sync_interval: must be at least 10ms, got %v", d.SyncInterval)
	case d.LeaseTTL < 2*d.SyncInterval:
		return fmt.Errorf("lease_ttl: must be at least twice sync_interval (%v), got %v", d.SyncInterval, d.LeaseTTL)
	case len(d.NodeID) > 200:
		return errors.New("node_id: must be at most 200 characters")
	case d.ExpectedNodes < 1:
		return fmt.Errorf("expected_nodes: must be at least 1, got %d", d.ExpectedNodes)
	}
	return nil
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

func isRedis(dsn string) bool {
	return strings.HasPrefix(dsn, "redis://") || strings.HasPrefix(dsn, "rediss://")
}

// Open opens the shared store named by dsn (Config.Store): Redis for
// redis:// and rediss://, else PostgreSQL.
func Open(ctx context.Context, dsn string) (Backend, error) {
	if isRedis(dsn) {
		r, err := OpenRedis(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	p, err := OpenPostgres(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Member is one upstream's engine as the cluster sees it. A Member that
// is also a Learner shares the provider's reports it receives.
type Member interface {
	// Key is the shared quota's key (Key).
	Key() string
	// Load returns its current load.
	Load() flow.ClusterLoad
	// Apply sets its share of the quota and its slots (< 0: uncapped),
	// and returns the fraction of its burst depth the change dropped
	// (flow.ClusterShare.SetShare).
	Apply(share float64, slots int) (dropped float64)
	// Credit adds f of its whole burst depth to its buckets, capped at
	// its own depth (flow.ClusterShare.Credit): a grant out of the key's burst
	// pool.
	Credit(f float64)
	// Pause pauses it until until (a pause another node published).
	Pause(until time.Time)
	// Breaker applies the shared breaker: openUntil is the shared opening
	// (zero: closed cluster-wide), probe whether this node holds the
	// probe token; a cleared opening closes a local breaker whose outage
	// began before since (zero: never; a fallback runs its own breaker).
	Breaker(openUntil time.Time, probe bool, since time.Time)
}

// memberState is the node's view of one member.
type memberState struct {
	m           Member
	share       float64 // applied
	slots       int     // applied cap; -1 uncapped
	prevDebited flow.Amount
	prevUrgent  flow.Amount // load.UrgentDebited at the last sync
	prevAt      time.Time
	published   time.Time // the latest pause published
	openPub     time.Time // the latest breaker opening published or applied
	sharedOpen  bool      // the last grant had a shared breaker opening
	probe       bool      // the last grant gave us the probe token
	urgentQueue bool      // the last report had work of the most urgent class queued
	lastOK      time.Time // when the last successful sync started
	leases      []Lease
	pausedUntil time.Time
	fallback    bool
	handover    time.Time             // until then, back from the fallback, the fallback's share and slots are kept (handing)
	learned     []flow.ClusterReport  // the last grant's provider reports
	sentLearned map[string]flow.Heard // the latest of our own reports the store has, per record
	starting    bool                  // not granted anything since Start
	returned    float64               // burst dropped applying grants, not yet reported
	pool        float64               // the burst pool left at the last sync
	backlogged  bool                  // the last report had work queued
	used        float64               // the share used lately (Used)
	urgent      float64               // the urgent classes' part of it (UrgentUsed)
	release     bool                  // the last grant lowered the share: report it at once
	credited    float64               // the burst credited since Start
	written     written               // this incarnation's lease on the key (Identity)
}

// Node runs a cluster node: a sync per member every interval, the leader
// lease, and the local fallback when the store cannot be reached.
type Node struct {
	cfg     Config
	id      *Identity
	backend Backend
	clk     clock.Clock
	log     *slog.Logger
	obs     Observer

	mu      sync.Mutex
	members []*memberState
	leader  bool
	lastErr error

	syncMu sync.Mutex     // one sync of a member at a time
	life   lifecycle.Base // Start and Stop; runs the syncs
}

// Observer receives a node's measurements, for metrics. Methods must not
// block.
type Observer interface {
	Synced(key string, share float64, took time.Duration, err error)
}

type nopObserver struct{}

func (nopObserver) Synced(string, float64, time.Duration, error) {}

// NewNode returns a Node syncing members through backend. Members start at
// no share until the first sync (Start runs one before returning).
func NewNode(cfg Config, backend Backend, members []Member, clk clock.Clock, log *slog.Logger, obs Observer) (*Node, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if obs == nil {
		obs = nopObserver{}
	}
	n := &Node{cfg: cfg, backend: backend, clk: clock.Or(clk), log: log, obs: obs}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.id = NewIdentity(cfg.NodeID, n.clk.Now(), n.log)
	for _, m := range members {
		n.members = append(n.members, &memberState{m: m, slots: -1, share: 1})
	}
	return n, nil
}

// ID returns the node id in use (Identity.ID).
func (n *Node) ID() string { return n.id.ID() }

// Identity returns the node's identity, for the Tenants that sync beside
// it.
func (n *Node) Identity() *Identity { return n.id }

// Start syncs every member once (so the node starts with its share; ctx
// bounds that sync) and then keeps syncing in the background until Stop
// (lifecycle.Base: a second Start answers lifecycle.ErrStarted, a Start
// after Stop lifecycle.ErrStopped).
func (n *Node) Start(ctx context.Context) error {
	err := n.life.Start(ctx, func(run context.Context) error {
		now := n.clk.Now()
		for _, ms := range n.members {
			// Until the first grant, nothing is ours (what a fresh process's
			// buckets hold is not: the key's burst pool stands for it).
			load := ms.m.Load()
			ms.share, ms.prevAt, ms.prevDebited, ms.prevUrgent, ms.starting = 0, now, load.Debited, load.UrgentDebited, true
			ms.m.Apply(0, 0)
		}
		n.syncAll(ctx)
		if l, ok := n.backend.(Listener); ok {
			n.life.Go(func() {
				l.Listen(run, func(key string) {
					for _, ms := range n.members {
						if ms.m.Key() == key {
							n.syncOne(run, ms)
						}
					}
				})
			})
		}
		n.life.Go(func() { n.loop(run) })
		return nil
	})
	if err != nil {
		return fmt.Errorf("starting cluster node: %w", err)
	}
	return nil
}

// Stop ends the syncs and gives this node's leases back. It is idempotent
// and safe before Start.
func (n *Node) Stop(ctx context.Context) error {
	err := n.life.Stop(ctx, func(ctx context.Context) error {
		// The syncs end first, so that none renews a lease given back.
		if err := n.life.Halt(ctx); err != nil {
			return err
		}
		lctx, cancel := context.WithTimeout(ctx, n.timeout())
		defer cancel()
		var errs []error
		for _, ms := range n.members {
			if ms.written.gen != 0 {
				errs = append(errs, n.backend.Leave(lctx, ms.m.Key(), ms.written.node, n.id.incStr))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return fmt.Errorf("stopping cluster node: %w", err)
	}
	return nil
}

// timeout bounds one store call: a third of the lease's life, at least a
// sync interval, so a slow store is waited for a while before the
// fallback, and a lease is renewed at least twice before it could expire.
func (n *Node) timeout() time.Duration {
	return max(n.cfg.SyncInterval, n.cfg.LeaseTTL/3)
}

func (n *Node) loop(ctx context.Context) {
	poll := n.clk.NewTimer(PausePollDefault)
	defer poll.Stop()
	next := n.clk.Now().Add(n.cfg.SyncInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C():
		}
		poll.Reset(PausePollDefault)
		if !n.clk.Now().Before(next) {
			next = n.clk.Now().Add(n.cfg.SyncInterval)
			n.syncAll(ctx)
			continue
		}
		// Between syncs: publish a new local pause or breaker opening, a
		// probe's success, or critical work newly queued (its demand
		// weighs 64x), at once.
		for _, ms := range n.members {
			if n.urgent(ms, ms.m.Load()) || n.newLimit(ms) {
				n.syncOne(ctx, ms)
			}
		}
	}
}

// urgent reports whether a member's load has news for the cluster that
// should not wait for the next sync.
func (n *Node) urgent(ms *memberState, l flow.ClusterLoad) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	queued := false
	for _, q := range l.QueuedCount {
		queued = queued || q > 0
	}
	return l.PausedUntil.After(ms.published) || l.BreakerOpenUntil.After(ms.openPub) ||
		(ms.sharedOpen && ms.probe && l.Breaker == flow.Closed) ||
		(l.QueuedCount[0] > 0 && !ms.urgentQueue) ||
		// A lowered share is held in the store until reported: release
		// it at the next poll rather than the next interval.
		ms.release ||
		// First demand while the burst pool holds something worth a sync
		// and this node has room for it: claim it now (at most twice an
		// interval, however often the queue empties).
		(queued && !ms.backlogged && ms.pool >= PoolClaimMin && l.BurstLevel < ms.share-PoolClaimMin &&
			n.clk.Now().Sub(ms.lastOK) >= n.cfg.SyncInterval/2)
}

func (n *Node) syncAll(ctx context.Context) {
	for _, ms := range n.members {
		n.syncOne(ctx, ms)
	}
	lctx, cancel := context.WithTimeout(ctx, n.timeout())
	node := n.id.ID()
	lead, err := n.backend.Lead(lctx, LeaderName, node, n.id.incStr, n.cfg.LeaseTTL)
	cancel()
	n.mu.Lock()
	if err != nil {
		lead = false // unsure: let nobody here run maintenance
	}
	changed := lead != n.leader
	n.leader = lead
	n.mu.Unlock()
	if changed {
		n.log.Info("cluster leadership changed", "node", node, "leader", lead)
	}
}

// syncOne syncs one member and applies its grant; on failure past the
// lease's life it falls back to 1/N.
func (n *Node) syncOne(ctx context.Context, ms *memberState) {
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	start := n.clk.Now()
	load := ms.m.Load()
	heard := heardOf(ms.m)
	n.mu.Lock()
	ms.used = Used(load, ms.prevDebited, start.Sub(ms.prevAt), ms.used)
	ms.urgent = UrgentUsed(load, ms.prevUrgent, start.Sub(ms.prevAt), ms.urgent)
	held := ms.slots
	if held < 0 {
		held = 0
	}
	r := Report{
		Key:        ms.m.Key(),
		Demand:     Demand(load, ms.used, ms.urgent),
		Share:      ms.share,
		SlotDemand: SlotDemand(load),
		Slots:      max(held, load.InFlight),
		MaxSlots:   load.MaxConcurrency,
		TTL:        n.cfg.LeaseTTL,
		Learned:    ms.toPublish(heard),
	}
	if load.PausedUntil.After(ms.published) {
		r.PausedUntil = load.PausedUntil
	}
	if load.BreakerOpenUntil.After(ms.openPub) {
		r.BreakerOpenUntil = load.BreakerOpenUntil
	}
	ms.urgentQueue = load.QueuedCount[0] > 0
	queued := 0
	for _, q := range load.QueuedCount {
		queued += q
	}
	r.WantProbe = load.Breaker == flow.HalfOpen && (queued > 0 || load.InFlight > 0)
	r.BreakerClosed = load.Breaker == flow.Closed && ms.sharedOpen && ms.probe
	ms.backlogged, ms.release = queued > 0, false
	handing := ms.fallback || start.Before(ms.handover)
	r.Starting, r.Backlog = ms.starting, Backlog(load)
	r.Level, r.BurstSeconds = min(max(load.BurstLevel, 0), 1), max(load.BurstSeconds, 0)
	// Reported once: a sync that fails or whose answer is lost gives
	// nothing back (the safe side).
	r.Returned, ms.returned = min(ms.returned, 1), 0
	if handing {
		// The fallback's share is applied without a grant: reported as
		// held, so that no node back sooner is granted it (the shares
		// held never sum above 1 while every node is back), and nothing
		// of the burst pool is claimed on top of it.
		r.Returned, r.Backlog = 0, 0
	}
	n.mu.Unlock()
	ms.prevDebited, ms.prevUrgent, ms.prevAt = load.Debited, load.UrgentDebited, start
	sctx, cancel := context.WithTimeout(ctx, n.timeout())
	// ms.written is syncMu's (held).
	g, err := n.id.sync(sctx, n.backend, r, &ms.written, start)
	cancel()
	took := n.clk.Now().Sub(start)
	n.obs.Synced(r.Key, g.Share, took, err)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.lastErr = err
		if !ms.fallback && start.Sub(ms.lastOK) >= n.cfg.LeaseTTL-n.cfg.SyncInterval {
			// Our lease may be gone by now: fall back to 1/N of the quota.
			nodes := fallbackNodes(len(ms.leases), ms.lastOK, n.cfg.ExpectedNodes)
			ms.fallback = true
			ms.starting = false // its buckets fill on the fallback share: no fresh pool
			ms.share = 1 / float64(nodes)
			ms.slots = max(load.MaxConcurrency/nodes, 1)
			if load.MaxConcurrency == 0 {
				ms.slots = -1
			}
			ms.handover = time.Time{}
			ms.m.Apply(ms.share, ms.slots)
			ms.sharedOpen, ms.probe = false, false
			n.leader = false                             // unsure: no maintenance here until the store answers
			ms.m.Breaker(time.Time{}, true, time.Time{}) // its own breaker, alone
			n.log.Warn("cluster store unreachable: falling back to a local share", "key", r.Key, "share", ms.share, "err", err)
		}
		return
	}
	if ms.fallback {
		// The handover: for one lease life every node that reaches the
		// store again has synced and reported its fallback share as held.
		// Until then this node keeps its own, neither lower (its live
		// traffic would stall until the nodes back sooner lowered, and a
		// cut cap until their requests in flight ended) nor higher (the
		// nodes still on their fallback hold theirs where the store
		// cannot see it).
		ms.handover = start.Add(n.cfg.LeaseTTL)
		n.log.Info("cluster store reachable again: sharing resumes after a handover", "key", r.Key, "handover", n.cfg.LeaseTTL)
	}
	n.lastErr = nil
	ms.fallback = false
	ms.lastOK = start
	ms.leases = g.Leases
	if !r.PausedUntil.IsZero() {
		ms.published = r.PausedUntil
	}
	if start.Before(ms.handover) {
		// Handing over: the fallback's share and slots stay applied (and
		// held by the lease this sync wrote); nothing to release.
		ms.release = false
	} else {
		ms.share, ms.slots = g.Share, g.Slots
		if load.MaxConcurrency == 0 {
			ms.slots = -1
		}
		ms.release = g.Share < r.Share
		ms.returned += ms.m.Apply(ms.share, ms.slots)
		ms.m.Credit(g.Credit)
		ms.credited += g.Credit
	}
	ms.starting, ms.pool = false, g.Pool
	// The share first, then the reports: a remaining bounds this node's
	// share of it.
	ms.markPublished(r.Learned)
	ms.learned = g.Learned
	adopt(ms.m, g.Learned)
	if !r.BreakerOpenUntil.IsZero() {
		ms.openPub = r.BreakerOpenUntil
	}
	if g.BreakerOpenUntil.After(ms.openPub) {
		ms.openPub = g.BreakerOpenUntil
	}
	if ms.sharedOpen || !g.BreakerOpenUntil.IsZero() {
		ms.m.Breaker(g.BreakerOpenUntil, g.Probe, start)
	}
	ms.sharedOpen, ms.probe = !g.BreakerOpenUntil.IsZero(), g.Probe
	if g.PausedUntil.After(load.PausedUntil) && g.PausedUntil.After(start) {
		ms.pausedUntil = g.PausedUntil
		if g.PausedUntil.After(ms.published) {
			ms.published = g.PausedUntil
		}
		ms.m.Pause(g.PausedUntil)
	}
}

// fallbackNodes is the N of a fallback share (1/N): the nodes last seen
// holding a lease, or expected when the store never answered (lastOK
// zero), at least 1.
func fallbackNodes(seen int, lastOK time.Time, expected int) int {
	if lastOK.IsZero() {
		return max(expected, 1)
	}
	return max(seen, 1)
}

// IsLeader reports whether this node holds the maintenance leadership.
func (n *Node) IsLeader() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leader
}

// Status is the node's cluster view, for /v1/status and /readyz.
type Status struct {
	// Node is the node id in use; ConfiguredNode the configured one
	// (they differ once this node met a duplicate and took a fresh id).
	Node           string
	ConfiguredNode string
	// Incarnation is this process's (Incarnation.String); DuplicateOf
	// that of the other process under ConfiguredNode that made this one
	// rename ("": none), at RenamedAt.
	Incarnation string
	DuplicateOf string
	RenamedAt   time.Time
	Leader      bool
	Degraded    bool // some member runs on its fallback share
	LastErr     string
	Members     []MemberStatus
}

// MemberStatus is one upstream's shared quota.
type MemberStatus struct {
	Key      string
	Share    float64
	Slots    int
	Fallback bool
	Leases   []Lease
	// BreakerShared says the last grant carried a shared breaker opening;
	// Probe that this node held the cluster's probe token.
	BreakerShared bool
	Probe         bool
	// Learned are the cluster's latest provider reports for this key
	// (limits learned from headers and the remaining), with who
	// reported them.
	Learned []flow.ClusterReport
	// Pool is what the key's burst pool held after this node's last sync,
	// and Credited the part of the burst this node was credited since it
	// started (fractions of the whole burst depth).
	Pool, Credited float64
}

// Status returns the node's current view.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Status{Node: n.id.ID(), ConfiguredNode: n.id.Configured(), Incarnation: n.id.incStr, Leader: n.leader}
	s.DuplicateOf, s.RenamedAt = n.id.Rival()
	if n.lastErr != nil {
		s.LastErr = n.lastErr.Error()
	}
	for _, ms := range n.members {
		s.Degraded = s.Degraded || ms.fallback
		s.Members = append(s.Members, MemberStatus{Key: ms.m.Key(), Share: ms.share, Slots: ms.slots,
			Fallback: ms.fallback, Leases: append([]Lease(nil), ms.leases...), BreakerShared: ms.sharedOpen, Probe: ms.probe,
			Learned: append([]flow.ClusterReport(nil), ms.learned...), Pool: ms.pool, Credited: ms.credited})
	}
	return s
}
