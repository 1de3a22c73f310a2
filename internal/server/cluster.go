package server

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
)

// WithClusterBackend makes the server a node of the cluster sharing b
// (e.g. a cluster.Memory shared by the servers of a test) instead of the
// store cluster.store names. The server closes b when it stops.
func WithClusterBackend(b admit.ClusterBackend) Option {
	return func(o *options) { o.clusterBackend = b }
}

// clusterStore is the shared store in use ("" when sharing is off).
func (c Config) clusterStore() string { return admit.ClusterStore(c.Cluster, c.Store) }

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// startCluster makes the gateway a node of its cluster, when sharing is
// on: the admission layer shares the upstreams' quotas and the clients'
// limits and budgets (admit.Layer.JoinCluster). s.mu is held.
func (s *Server) startCluster(ctx context.Context) error {
	dsn := s.cfg.clusterStore()
	if dsn == "" && s.clusterGiven == nil {
		return nil
	}
	if dsn != "" && s.cfg.Cluster.WithDefaults().ExpectedNodes == 1 {
		// A node that starts while the store is down serves on
		// 1/expected_nodes of each quota until it reaches it: with the
		// default of 1, the whole quota on every such node.
		s.log.Warn("cluster.expected_nodes is 1: a node that starts before the shared store answers takes each upstream's whole quota until it does; set it to the number of nodes the cluster runs",
			"expected_nodes", 1)
	}
	engines := map[string]*dispatch.Dispatcher{}
	for name, u := range s.upstreams {
		if d, ok := u.engine.(*dispatch.Dispatcher); ok {
			engines[name] = d
		}
	}
	return s.admit.JoinCluster(ctx, admit.ClusterParams{Config: s.cfg.Cluster, Store: dsn, Backend: s.clusterGiven,
		Engines: engines, Observer: s.view.ClusterObserver(), StoreObserver: s.view.StoreObserver()})
}

// stopCluster leaves the cluster (giving the shares back) and closes the
// shared store, after the dispatchers.
func (s *Server) stopCluster(ctx context.Context) error { return s.admit.LeaveCluster(ctx) }
