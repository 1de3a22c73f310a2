package server

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// WithClusterBackend makes the server a node of the cluster sharing b
// (e.g. a cluster.Memory shared by the servers of a test) instead of the
// store cluster.store names. The server closes b when it stops.
func WithClusterBackend(b cluster.Backend) Option {
	return func(o *options) { o.clusterBackend = b }
}

// WithSharedStore is WithStore for a store other gateways use too (like a
// PostgreSQL store named by Config.Store): each flush of the spend reads
// back what all of them spent, and on a cluster the budgets are shared.
func WithSharedStore(st jobstore.Store) Option {
	return func(o *options) { o.store, o.sharedStore = st, true }
}

// startTenants shares the per-client limits and, when the spend is
// shared through the store, the budgets with the cluster on b (the
// admission layer's tenants; it stops them). s.mu is held.
func (s *Server) startTenants(ctx context.Context, b cluster.Backend) error {
	cfg := s.cfg.Cluster
	var id *cluster.Identity // the node's: both sync, and rename, as one process
	if n := s.cluster.Load(); n != nil {
		id = n.Identity()
	}
	t, err := cluster.NewTenants(cfg, id, b, s.clock, s.log)
	if err != nil {
		return fmt.Errorf("sharing client limits with the cluster: %w", err)
	}
	if err := t.Start(ctx); err != nil {
		return fmt.Errorf("sharing client limits with the cluster: %w", err)
	}
	cfg = cfg.WithDefaults()
	s.admit.ShareWith(t, max(cfg.SyncInterval, cfg.LeaseTTL/3))
	return nil
}
