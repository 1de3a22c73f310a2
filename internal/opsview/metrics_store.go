package opsview

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// storeMetrics is the gauge of the gateway's connections to its stores,
// registered on first use (a gateway without a store has none).
type storeMetrics struct {
	once      sync.Once
	connected *prometheus.GaugeVec
}

// StoreObserver returns the observer of the gateway's store links
// (storelink.Config.Observer): sluice_store_connected{store} is 1 while
// the store named store ("jobs" or "cluster") answers, 0 while it is not
// connected yet or lost.
func (v *View) StoreObserver() func(store string, connected bool) {
	sm := &v.metrics.stores
	sm.once.Do(func() {
		sm.connected = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_store_connected",
			Help: "1 while the store (store=\"jobs\": the job store; store=\"cluster\": the cluster's shared store) answers, 0 while it is not connected yet or lost: the gateway serves live traffic either way.",
		}, []string{"store"})
		v.metrics.registry.MustRegister(sm.connected)
	})
	return func(store string, connected bool) {
		g := 0.0
		if connected {
			g = 1
		}
		sm.connected.WithLabelValues(store).Set(g)
	}
}
