package opsview

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/flow"
)

// poolMetrics are the key pools' and fallbacks' metrics: per key (labelled
// by its fingerprint, never the key) and fallbacks taken by reason.
type poolMetrics struct {
	fallbacks *prometheus.CounterVec
}

func newPoolMetrics(reg *prometheus.Registry, v *View) *poolMetrics {
	p := &poolMetrics{fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_fallbacks_total",
		Help: "Requests sent to a fallback upstream, by primary, fallback and reason (unavailable, deadline).",
	}, []string{"upstream", "fallback", "reason"})}
	reg.MustRegister(p.fallbacks, &keyCollector{v: v})
	for _, u := range v.upstreams {
		for _, f := range u.Fallbacks {
			for _, r := range []string{admit.FallbackUnavailable, admit.FallbackDeadline} {
				p.fallbacks.WithLabelValues(u.Name, f.Upstream, r)
			}
		}
	}
	return p
}

func (p *poolMetrics) fallbackTaken(upstream, fallback, reason string) {
	p.fallbacks.WithLabelValues(upstream, fallback, reason).Inc()
}

var (
	keyRequestsDesc = prometheus.NewDesc("sluice_key_requests_total",
		"Upstream attempts sent with each key of an upstream's pool.", []string{"upstream", "key"}, nil)
	keyRateLimitedDesc = prometheus.NewDesc("sluice_key_rate_limited_total",
		"Rate-limit (429) answers each key of the pool got.", []string{"upstream", "key"}, nil)
	keyRevokedDesc = prometheus.NewDesc("sluice_key_revoked_total",
		"Times each key was taken out of the pool (401/403, out of credit, access terminated).", []string{"upstream", "key"}, nil)
	keyBucketDesc = prometheus.NewDesc("sluice_key_bucket_level",
		"Room in each key's quota bucket now, per dimension.", []string{"upstream", "key", "dimension"}, nil)
	keyPausedDesc = prometheus.NewDesc("sluice_key_paused",
		"1 while the key is paused after a 429.", []string{"upstream", "key"}, nil)
	keyOutDesc = prometheus.NewDesc("sluice_key_out",
		"1 while the key is taken out of the pool.", []string{"upstream", "key"}, nil)
	keyInFlightDesc = prometheus.NewDesc("sluice_key_in_flight",
		"Requests in flight with each key.", []string{"upstream", "key"}, nil)
)

// keyCollector reads every pool's keys on scrape.
type keyCollector struct{ v *View }

func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{keyRequestsDesc, keyRateLimitedDesc, keyRevokedDesc, keyBucketDesc, keyPausedDesc, keyOutDesc, keyInFlightDesc} {
		ch <- d
	}
}

func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.v.clock.Now()
	for _, name := range c.v.order {
		e := c.v.engine(name)
		if e == nil {
			continue
		}
		for _, k := range e.Keys() {
			ch <- prometheus.MustNewConstMetric(keyRequestsDesc, prometheus.CounterValue, float64(k.Requests), name, k.Fingerprint)
			ch <- prometheus.MustNewConstMetric(keyRateLimitedDesc, prometheus.CounterValue, float64(k.RateLimited), name, k.Fingerprint)
			ch <- prometheus.MustNewConstMetric(keyRevokedDesc, prometheus.CounterValue, float64(k.Revoked), name, k.Fingerprint)
			ch <- prometheus.MustNewConstMetric(keyPausedDesc, prometheus.GaugeValue, boolGauge(k.PausedUntil.After(now)), name, k.Fingerprint)
			ch <- prometheus.MustNewConstMetric(keyOutDesc, prometheus.GaugeValue, boolGauge(k.Out), name, k.Fingerprint)
			ch <- prometheus.MustNewConstMetric(keyInFlightDesc, prometheus.GaugeValue, float64(k.InFlight), name, k.Fingerprint)
			for d, b := range k.Buckets {
				if b.Capacity > 0 {
					ch <- prometheus.MustNewConstMetric(keyBucketDesc, prometheus.GaugeValue, b.Level, name, k.Fingerprint, flow.Dim(d).String())
				}
			}
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
