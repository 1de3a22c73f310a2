package admit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/storelink"
	"github.com/sluicehq/sluice/upstream"
)

// A gateway on a cluster (docs/cluster.md) shares, over one shared store,
// each upstream's quota, concurrency, pauses and breaker (a cluster.Node
// whose members are the upstreams' dispatchers) and its clients' limits
// and budgets (cluster.Tenants, see share.go). The layer runs both: one
// call joins the cluster, one leaves it, in order.

// ClusterConfig is the gateway's cluster: section (docs/config.md). The
// cluster package defines it; the gateway's config names it through the
// layer that joins the cluster with it.
type ClusterConfig = cluster.Config

// ClusterBackend is a cluster's shared store: what cluster.Open opens
// from ClusterConfig.Store, or a cluster.Memory shared by a test's
// gateways.
type ClusterBackend = cluster.Backend

// ClusterStore returns the shared store of a gateway whose cluster:
// section is cfg and whose job store is jobStore: cfg.Store, else the job
// store when it is PostgreSQL; "" when sharing is off.
func ClusterStore(cfg ClusterConfig, jobStore string) string {
	switch {
	case cfg.Store == cluster.StoreOff:
		return ""
	case cfg.Store != "":
		return cfg.Store
	case isPostgres(jobStore):
		return jobStore
	}
	return ""
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// ClusterParams say how a gateway joins its cluster.
type ClusterParams struct {
	// Config is the gateway's cluster: section. Defaults to the cluster
	// package's defaults.
	Config ClusterConfig
	// Store is the shared store to open (ClusterStore). Ignored when
	// Backend is set. Defaults to none.
	Store string
	// Backend is a shared store already open, used instead of Store; the
	// layer closes it when it leaves. Defaults to none.
	Backend ClusterBackend
	// Engines are the upstreams' dispatchers by upstream name: each is a
	// member of the node, in config order. An upstream without one (a
	// test's fake engine) does not share its quota. Defaults to none.
	Engines map[string]*dispatch.Dispatcher
	// Observer receives the node's syncs (the metrics). Defaults to none.
	Observer cluster.Observer
	// StoreObserver is told when the shared store connects and is lost
	// (the sluice_store_connected gauge). Defaults to none.
	StoreObserver func(store string, connected bool)
}

// membership is the node, the tenants' store and what Leave closes.
type membership struct {
	node    *cluster.Node
	backend cluster.Backend
	link    *cluster.Connecting // the store p.Store named; nil for a given Backend
}

// JoinCluster starts connecting to the shared store (or takes
// p.Backend), starts this node's syncs of the upstreams' shares, then
// makes the clients' limits and budgets tenants of the cluster. It does
// nothing when neither p.Store nor p.Backend is set.
//
// It does not wait for the store past storelink.StartWait: a store named
// by p.Store is opened in the background (cluster.Connecting, with
// backoff), and until it
// answers the node and the tenants run on their fallback share, 1/N of
// each quota and each client's limit (N is Config.ExpectedNodes), as
// they do when the store is lost later. ctx bounds the first syncs. On
// failure what was started is stopped again.
func (l *Layer) JoinCluster(ctx context.Context, p ClusterParams) error {
	if p.Store == "" && p.Backend == nil {
		return nil
	}
	cluster.SetRedisLogger(l.log) // the Redis client's own messages, as structured lines
	var members []cluster.Member
	for _, uc := range l.upstreams {
		if d, ok := p.Engines[uc.Name]; ok {
			members = append(members, clusterMember{d: d, key: cluster.Key(uc.Name, poolSecret(uc))})
		}
	}
	b := p.Backend
	var link *cluster.Connecting
	if b == nil {
		c, err := cluster.NewConnecting(p.Store, storelink.Config{Clock: l.clock, Logger: l.log, Observer: p.StoreObserver})
		if err != nil {
			return fmt.Errorf("starting the cluster node: %w", err)
		}
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("starting the cluster node: %w", err)
		}
		// A healthy store answers at once: the node then starts on its
		// grant, as before, rather than on the fallback share.
		c.Await(ctx, storelink.StartWait)
		b, link = c, c
	}
	n, err := cluster.NewNode(p.Config, b, members, l.clock, l.log, p.Observer)
	if err != nil {
		return errors.Join(fmt.Errorf("starting the cluster node: %w", err), b.Close())
	}
	if err := n.Start(ctx); err != nil {
		return errors.Join(fmt.Errorf("starting the cluster node: %w", err), b.Close())
	}
	if err := l.startTenants(ctx, p.Config, n.Identity(), b); err != nil {
		return errors.Join(err, n.Stop(ctx), b.Close())
	}
	l.mu.Lock()
	l.member = &membership{node: n, backend: b, link: link}
	l.mu.Unlock()
	l.log.Info("sharing quotas with the cluster", "node", n.ID(), "upstreams", len(members))
	return nil
}

// startTenants shares the per-client limits and, when the spend is
// shared through the store, the budgets with the cluster on b, under the
// node's identity (both sync, and rename, as one process).
func (l *Layer) startTenants(ctx context.Context, cfg ClusterConfig, id *cluster.Identity, b cluster.Backend) error {
	t, err := cluster.NewTenants(cfg, id, b, l.clock, l.log)
	if err != nil {
		return fmt.Errorf("sharing client limits with the cluster: %w", err)
	}
	if err := t.Start(ctx); err != nil {
		return fmt.Errorf("sharing client limits with the cluster: %w", err)
	}
	cfg = cfg.WithDefaults()
	l.shareWith(t, max(cfg.SyncInterval, cfg.LeaseTTL/3))
	return nil
}

// LeaveCluster gives the tenants' leases back, stops the node (giving its
// shares back) and closes the shared store, in that order, once the
// dispatchers are stopped. It does nothing when the layer never joined.
func (l *Layer) LeaveCluster(ctx context.Context) error {
	l.mu.Lock()
	m := l.member
	l.mu.Unlock()
	if m == nil {
		return nil
	}
	err := errors.Join(l.stopSharing(ctx), m.node.Stop(ctx))
	return errors.Join(err, m.backend.Close())
}

// ClusterStatus is the node's view of the cluster, for /v1/status and
// /readyz; ok is false while the gateway does not share its quotas.
func (l *Layer) ClusterStatus() (st cluster.Status, ok bool) {
	l.mu.Lock()
	m := l.member
	l.mu.Unlock()
	if m == nil {
		return cluster.Status{}, false
	}
	return m.node.Status(), true
}

// ClusterStoreState is the shared store's connection (storelink.State);
// ok is false while the gateway does not share its quotas, or shares
// them through a Backend it was given.
func (l *Layer) ClusterStoreState() (st storelink.State, ok bool) {
	l.mu.Lock()
	m := l.member
	l.mu.Unlock()
	if m == nil || m.link == nil {
		return 0, false
	}
	st, _, _ = m.link.State()
	return st, true
}

// ClusterLeading is the job cleaner's gate: on a cluster only the leader
// cleans; nil (always) when the gateway does not share its quotas.
func (l *Layer) ClusterLeading() func() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.member == nil {
		return nil
	}
	return l.member.node.IsLeader
}

// ClusterNodeID is the node id in use now ("" when the gateway does not
// share its quotas): the job queue's lease owner, so a job's lease names
// its node as the cluster does.
func (l *Layer) ClusterNodeID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.member == nil {
		return ""
	}
	return l.member.node.ID()
}

// poolSecret is what names an upstream's quota in the cluster's shared
// state: its API key, or all its pool's keys (in configured order), so
// nodes share a quota only when they use the same keys.
func poolSecret(c upstream.Config) string {
	keys := c.Keys()
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.Key
	}
	return strings.Join(parts, "\n")
}

// clusterMember adapts a dispatcher to cluster.Member and
// cluster.Learner.
type clusterMember struct {
	d   *dispatch.Dispatcher
	key string
}

func (m clusterMember) Key() string { return m.key }

func (m clusterMember) Load() flow.ClusterLoad { return m.d.ClusterLoad() }

func (m clusterMember) Apply(share float64, slots int) float64 {
	return m.d.SetClusterShare(share, slots)
}
func (m clusterMember) Credit(f float64)      { m.d.CreditCluster(f) }
func (m clusterMember) Pause(until time.Time) { m.d.ApplyPause(until) }
func (m clusterMember) Breaker(openUntil time.Time, probe bool, since time.Time) {
	m.d.ApplyClusterBreaker(openUntil, probe, since)
}

// Heard implements cluster.Learner: the provider reports this node's
// dispatcher received.
func (m clusterMember) Heard() []flow.ClusterReport { return m.d.ClusterReports() }

// Adopt implements cluster.Learner: the cluster's latest reports, applied
// to the dispatcher.
func (m clusterMember) Adopt(ls []flow.ClusterReport) { m.d.AdoptClusterReports(ls) }

var _ interface {
	cluster.Member
	cluster.Learner
} = clusterMember{}
