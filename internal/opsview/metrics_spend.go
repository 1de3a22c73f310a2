package opsview

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/quota"
)

// admitMetrics are the admission layer's metrics: its Observer
// (docs/budgets.md, docs/pools.md). Labels are bounded: clients come from
// the config (or the key digest when none are configured), upstreams from
// the config, models are price-table entries or "unknown", windows are
// day, month and total.
type admitMetrics struct {
	spentUSD    *prometheus.CounterVec
	refusals    *prometheus.CounterVec
	orphanedUSD *prometheus.CounterVec
	undurable   *prometheus.CounterVec
	flexSpend   *prometheus.CounterVec
	flexSaved   *prometheus.CounterVec
	routed      *routedTotals // the flex tier's figures for /v1/status
	pool        *poolMetrics  // the fallbacks' counter
	// log keeps every wait and refusal with its reason (admission_log.go).
	log   *admissionLog
	clock clock.Clock
}

var _ admit.Observer = (*admitMetrics)(nil)

// AdmitObserver returns the admission layer's observer: the spend,
// budget refusal and fallback series.
func (v *View) AdmitObserver() admit.Observer { return v.metrics.admit }

func newAdmitMetrics(reg *prometheus.Registry, v *View, pool *poolMetrics, routed *routedTotals) *admitMetrics {
	m := &admitMetrics{pool: pool, routed: routed, log: newAdmissionLog(), clock: v.clock,
		flexSpend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_flex_spend_usd_total",
			Help: "What the answers served in OpenAI's flex tier cost, at the flex price (USD).",
		}, []string{"upstream"}),
		flexSaved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_flex_saved_usd_total",
			Help: "Money saved by the flex tier: what its answers would have cost in the standard tier less what they cost (USD).",
		}, []string{"upstream"}),
		spentUSD: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_spend_usd_total",
			Help: "US dollars spent (settled at the price table) since the gateway started, by client, upstream and price-table model.",
		}, []string{"client", "upstream", "model"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_budget_refusals_total",
			Help: "Requests refused by their client's spend budget, by window (day, month, total) and reason (exhausted, pending, too_large, unknown_model).",
		}, []string{"client", "window", "reason"}),
		orphanedUSD: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_spend_orphaned_usd_total",
			Help: "US dollars charged, at their worst case, for the budgeted requests a process left in flight when it ended without settling them (a crash), by client.",
		}, []string{"client"}),
		undurable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_spend_undurable_total",
			Help: "Budgeted requests sent without their reservation written to the store (it did not answer in time): a crash before their spend is written loses it, by client.",
		}, []string{"client"}),
	}
	reg.MustRegister(m.spentUSD, m.refusals, m.orphanedUSD, m.undurable, m.flexSpend, m.flexSaved, &budgetCollector{v: v})
	return m
}

// FlexSpent implements admit.Observer.
func (m *admitMetrics) FlexSpent(upstream string, usd, standardUSD float64) {
	m.flexSpend.WithLabelValues(upstream).Add(max(usd, 0))
	m.flexSaved.WithLabelValues(upstream).Add(max(standardUSD-usd, 0))
	m.routed.add(upstream, func(t *BatchRouteStatus) {
		t.FlexAnswers++
		t.FlexSpentUSD += max(usd, 0)
		t.FlexStandardUSD += max(standardUSD, usd, 0)
	})
}

// Spent implements admit.Observer.
func (m *admitMetrics) Spent(client, upstream, model string, usd float64) {
	m.spentUSD.WithLabelValues(client, upstream, model).Add(usd)
}

// BudgetRefused implements admit.Observer.
func (m *admitMetrics) BudgetRefused(client, window, reason string) {
	m.refusals.WithLabelValues(client, window, reason).Inc()
}

// SpendOrphaned implements admit.Observer.
func (m *admitMetrics) SpendOrphaned(client string, usd float64) {
	m.orphanedUSD.WithLabelValues(client).Add(usd)
}

// SpendUndurable implements admit.Observer.
func (m *admitMetrics) SpendUndurable(client string) { m.undurable.WithLabelValues(client).Inc() }

// FallbackTaken implements admit.Observer.
func (m *admitMetrics) FallbackTaken(upstream, fallback, reason string) {
	m.pool.fallbackTaken(upstream, fallback, reason)
}

var (
	reservedDesc = prometheus.NewDesc("sluice_spend_reserved_usd",
		"US dollars reserved by a client's requests in flight (their worst case), not yet settled.", []string{"client"}, nil)
	remainingDesc = prometheus.NewDesc("sluice_budget_remaining_usd",
		"US dollars left in a client's budget window (limit - spent - reserved); only windows with a limit.", []string{"client", "window"}, nil)
	limitDesc = prometheus.NewDesc("sluice_budget_limit_usd",
		"A client's budget per window, in US dollars; only windows with a limit.", []string{"client", "window"}, nil)
)

// budgetCollector reads the ledger on scrape: O(clients).
type budgetCollector struct{ v *View }

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- reservedDesc
	ch <- remainingDesc
	ch <- limitDesc
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	if c.v.admission == nil {
		return
	}
	for _, a := range c.v.admission.Accounts(c.v.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, a.Day.Reserved.Dollars(), a.Client)
		for _, w := range quota.Windows {
			u := a.Of(w)
			if u.Limit <= 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, u.Remaining().Dollars(), a.Client, string(w))
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, u.Limit.Dollars(), a.Client, string(w))
		}
	}
}
