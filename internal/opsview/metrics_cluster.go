package opsview

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/cluster"
)

// clusterMetrics are the cluster node's metrics, registered on first use
// (only a node that shares its quotas has them).
type clusterMetrics struct {
	once   sync.Once
	share  *prometheus.GaugeVec
	syncs  *prometheus.HistogramVec
	errors *prometheus.CounterVec
}

// ClusterObserver returns the cluster node's observer, registering its
// metrics on the first call: call it only when the gateway joins a
// cluster.
func (v *View) ClusterObserver() cluster.Observer {
	cm := &v.metrics.cluster
	cm.once.Do(func() { cm.register(v.metrics.registry) })
	return cm
}

func (cm *clusterMetrics) register(reg *prometheus.Registry) {
	cm.share = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_cluster_share",
		Help: "This node's granted share of the upstream's quota (0..1).",
	}, []string{"upstream"})
	cm.syncs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_cluster_sync_seconds",
		Help:    "Duration of a cluster lease sync with the shared store.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"upstream"})
	cm.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cluster_sync_errors_total",
		Help: "Cluster lease syncs that failed (the store did not answer in time).",
	}, []string{"upstream"})
	reg.MustRegister(cm.share, cm.syncs, cm.errors)
}

// upstreamOf is the upstream name of a cluster key (name/fingerprint).
func upstreamOf(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

func (cm *clusterMetrics) Synced(key string, share float64, took time.Duration, err error) {
	u := upstreamOf(key)
	cm.syncs.WithLabelValues(u).Observe(took.Seconds())
	if err != nil {
		cm.errors.WithLabelValues(u).Inc()
		return
	}
	cm.share.WithLabelValues(u).Set(share)
}
