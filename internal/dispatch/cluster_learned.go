package dispatch

import (
	"github.com/sluicehq/sluice/internal/flow"
)

// ClusterReports returns what the provider's rate-limit headers told this
// node of each key of the pool (flow.ClusterShare.Heard): the latest limit and
// remaining per dimension, for the cluster to share. Account is the key's
// Fingerprint.
func (d *Dispatcher) ClusterReports() []flow.ClusterReport {
	var out []flow.ClusterReport
	for _, k := range d.keys {
		fp := k.cred.Load().fp
		for dim, h := range k.lim.Cluster().Heard() {
			if h.HasLimit() || h.HasRemaining() {
				out = append(out, flow.ClusterReport{Account: fp, Dim: flow.Dim(dim), Heard: h})
			}
		}
	}
	return out
}

// AdoptClusterReports applies the cluster's latest provider reports to
// the keys they name (flow.ClusterShare.Adopt): a limit another node learned
// is learned here at once (and noted like one learned here), a remaining
// lowers this node's share of the buckets. Reports of keys this node does
// not have (a rotation, another pool) are ignored.
func (d *Dispatcher) AdoptClusterReports(rs []flow.ClusterReport) {
	if len(rs) == 0 {
		return
	}
	now := d.clk.Now()
	byFP := make(map[string]*poolKey, len(d.keys))
	for _, k := range d.keys {
		byFP[k.cred.Load().fp] = k
	}
	for _, r := range rs {
		k := byFP[r.Account]
		if k == nil {
			continue
		}
		k.lim.Cluster().Adopt(r.Dim, r.Heard, now)
		if r.HasLimit() {
			d.noteLimits(k, map[flow.Dim]flow.Observation{r.Dim: {Limit: r.Limit, Remaining: -1}})
		}
	}
	d.kick()
}
