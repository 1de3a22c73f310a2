package server

import (
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
)

// Heard implements cluster.Learner: the provider reports this node's
// dispatcher received.
func (m clusterMember) Heard() []cluster.Learned {
	rs := m.d.ClusterReports()
	out := make([]cluster.Learned, len(rs))
	for i, r := range rs {
		out[i] = cluster.Learned{Account: r.Account, Dim: r.Dim, Heard: r.Heard}
	}
	return out
}

// Adopt implements cluster.Learner: the cluster's latest reports, applied
// to the dispatcher.
func (m clusterMember) Adopt(ls []cluster.Learned) {
	rs := make([]dispatch.ClusterReport, len(ls))
	for i, l := range ls {
		rs[i] = dispatch.ClusterReport{Account: l.Account, Dim: l.Dim, Heard: l.Heard}
	}
	m.d.AdoptClusterReports(rs)
}
