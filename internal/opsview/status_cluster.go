package opsview

import (
	"time"
)

// ClusterStatus is /v1/status's cluster section: this node, the leader,
// and every upstream's shares (omitted when sharing is off).
type ClusterStatus struct {
	// Node is the node id in use, ConfiguredNode the configured one
	// (cluster.node_id): they differ once this process met another under
	// the same id and, the younger, took a fresh one. Incarnation names
	// this process; DuplicateOf the other one (and RenamedAt when).
	Node           string     `json:"node"`
	ConfiguredNode string     `json:"configured_node"`
	Incarnation    string     `json:"incarnation"`
	DuplicateOf    string     `json:"duplicate_of,omitempty"`
	RenamedAt      *time.Time `json:"renamed_at,omitempty"`
	Leader         bool       `json:"leader"`
	// Degraded: the shared store did not answer in time and some upstream
	// runs on its fallback share (1/N of its quota).
	Degraded  bool                    `json:"degraded"`
	LastError string                  `json:"last_error,omitempty"`
	Upstreams []ClusterUpstreamStatus `json:"upstreams"`
}

// ClusterUpstreamStatus is one upstream's shared quota.
type ClusterUpstreamStatus struct {
	Name     string  `json:"name"`
	Share    float64 `json:"share"`
	Slots    int     `json:"slots"`
	Fallback bool    `json:"fallback"`
	// BreakerShared: an outage seen by some node holds this upstream's
	// breaker open (or half-open) on every node; Probe: this node holds
	// the cluster's one probe token.
	BreakerShared bool `json:"breaker_shared"`
	Probe         bool `json:"probe"`
	// BurstPool is what the upstream's burst pool held after this node's
	// last sync, BurstCredited the part of the burst this node was
	// credited from it since it started (fractions of the burst depth).
	BurstPool     float64            `json:"burst_pool"`
	BurstCredited float64            `json:"burst_credited"`
	Nodes         []ClusterNodeShare `json:"nodes"`
	// Learned are the provider's latest reports any node received, as the
	// cluster shares them (cluster_learned.go).
	Learned []ClusterLearned `json:"learned"`
}

// ClusterNodeShare is one node's lease.
type ClusterNodeShare struct {
	Node      string    `json:"node"`
	Share     float64   `json:"share"`
	Slots     int       `json:"slots"`
	Demand    float64   `json:"demand"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ClusterStatus is /v1/status's cluster section, nil when the gateway
// does not share its quotas.
func (v *View) ClusterStatus() *ClusterStatus {
	if v.cluster == nil {
		return nil
	}
	st, ok := v.cluster.ClusterStatus()
	if !ok {
		return nil
	}
	out := &ClusterStatus{Node: st.Node, ConfiguredNode: st.ConfiguredNode, Incarnation: st.Incarnation,
		DuplicateOf: st.DuplicateOf, Leader: st.Leader, Degraded: st.Degraded, LastError: st.LastErr,
		Upstreams: []ClusterUpstreamStatus{}}
	if !st.RenamedAt.IsZero() {
		at := st.RenamedAt.UTC()
		out.RenamedAt = &at
	}
	for _, m := range st.Members {
		u := ClusterUpstreamStatus{Name: upstreamOf(m.Key), Share: m.Share, Slots: m.Slots, Fallback: m.Fallback,
			BreakerShared: m.BreakerShared, Probe: m.Probe, BurstPool: m.Pool, BurstCredited: m.Credited,
			Nodes: []ClusterNodeShare{}, Learned: clusterLearned(m.Learned)}
		for _, l := range m.Leases {
			u.Nodes = append(u.Nodes, ClusterNodeShare{Node: l.Node, Share: l.Share, Slots: l.Slots, Demand: l.Demand,
				ExpiresAt: l.ExpiresAt.UTC()})
		}
		out.Upstreams = append(out.Upstreams, u)
	}
	return out
}
