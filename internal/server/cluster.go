package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// clusterStore is the shared store in use ("" when sharing is off).
func (c Config) clusterStore() string {
	switch {
	case c.Cluster.Store == cluster.StoreOff:
		return ""
	case c.Cluster.Store != "":
		return c.Cluster.Store
	case isPostgres(c.Store):
		return c.Store
	}
	return ""
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// clusterMember adapts a dispatcher to cluster.Member.
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

// startCluster opens the shared store and starts this node's syncs, when
// sharing is on. s.mu is held.
func (s *Server) startCluster(ctx context.Context) error {
	dsn := s.cfg.clusterStore()
	if dsn == "" && s.clusterGiven == nil {
		return nil
	}
	var members []cluster.Member
	for _, name := range s.order {
		d, ok := s.upstreams[name].engine.(*dispatch.Dispatcher)
		if !ok {
			continue
		}
		members = append(members, clusterMember{d: d, key: cluster.Key(name, poolSecret(s.upstreams[name].cfg))})
	}
	b := s.clusterGiven
	if b == nil {
		opened, err := cluster.Open(ctx, dsn)
		if err != nil {
			return fmt.Errorf("starting the cluster node: %w", err)
		}
		b = opened
	}
	n, err := cluster.NewNode(s.cfg.Cluster, b, members, s.clock, s.log, s.metrics.clusterObserver())
	if err != nil {
		return errors.Join(fmt.Errorf("starting the cluster node: %w", err), b.Close())
	}
	if err := n.Start(ctx); err != nil {
		return errors.Join(fmt.Errorf("starting the cluster node: %w", err), b.Close())
	}
	s.cluster.Store(n)
	s.clusterBackend = b
	if err := s.startTenants(ctx, b); err != nil { // cluster_tenants.go
		return errors.Join(err, n.Stop(ctx), b.Close())
	}
	s.log.Info("sharing quotas with the cluster", "node", n.ID(), "upstreams", len(members))
	return nil
}

// stopCluster stops the node (giving its shares back) and closes the
// shared store, after the dispatchers.
func (s *Server) stopCluster(ctx context.Context) error {
	n := s.cluster.Load()
	if n == nil {
		return nil
	}
	err := errors.Join(s.admit.StopSharing(ctx), n.Stop(ctx))
	return errors.Join(err, s.clusterBackend.Close())
}

// clusterLeading is the job cleaner's gate: on a cluster only the leader
// cleans; nil (always) when sharing is off.
func (s *Server) clusterLeading() func() bool {
	n := s.cluster.Load()
	if n == nil {
		return nil
	}
	return n.IsLeader
}

// clusterNodeID is the job queue's lease owner: on a cluster, the node id
// in use when the queue starts, so a job's lease names its node as the
// cluster does; "" (the queue's own hostname-pid) when sharing is off.
func (s *Server) clusterNodeID() string {
	if n := s.cluster.Load(); n != nil {
		return n.ID()
	}
	return ""
}

// poolSecret is what names an upstream's quota in the cluster's shared
// state: its API key, or all its pool's keys (in configured order), so
// nodes share a quota only when they use the same keys.
func poolSecret(c upcfg.Config) string {
	keys := c.Keys()
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.Key
	}
	return strings.Join(parts, "\n")
}
