package opsview

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// metrics is the Prometheus edge of the engine: it implements
// dispatch.Observer (one per upstream) and collects Snapshot gauges on
// scrape. Every label has bounded values: upstream names come from the
// config, priorities and classes are enums, statuses are HTTP codes.
type metrics struct {
	registry    *prometheus.Registry
	requests    *prometheus.CounterVec
	passthrough *prometheus.CounterVec
	attempts    *prometheus.CounterVec
	retries     *prometheus.CounterVec
	shed        *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	breaker     *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	abandoned   *prometheus.CounterVec
	cached      *prometheus.CounterVec
	queueWait   *prometheus.HistogramVec
	latency     *prometheus.HistogramVec
	live        *live // the dashboard's counts, fed by the observers
	// jobs are the job queue's metrics; nil when the queue is disabled.
	jobs *jobMetrics
	// routed are the money the work that could wait saved, per upstream
	// (the batch route's lines and the flex tier's answers), for
	// /v1/status.
	routed  *routedTotals
	stores  storeMetrics   // metrics_store.go
	pool    *poolMetrics   // metrics_pool.go
	admit   *admitMetrics  // metrics_spend.go
	cluster clusterMetrics // metrics_cluster.go
}

func newMetrics(reg *prometheus.Registry, v *View, jobs bool) *metrics {
	m := &metrics{
		registry: reg,
		live:     v.live,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Scheduled proxy requests by upstream, endpoint (chat, responses, embeddings; other for a refused request to another path), priority class, outcome and client (a configured client's name, default for a keyless caller of an open gateway, other, unknown).",
		}, []string{"upstream", "endpoint", "priority", "outcome", "client"}),
		passthrough: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_passthrough_requests_total",
			Help: "Requests forwarded unscheduled (paths other than messages, chat completions, responses and embeddings).",
		}, []string{"upstream"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_attempts_total",
			Help: "Upstream attempts by outcome class and HTTP status (0 for transport errors).",
		}, []string{"upstream", "class", "status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_retries_total",
			Help: "Requests put back in the queue for another attempt, by the outcome class that caused it.",
		}, []string{"upstream", "reason"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_shed_total",
			Help: "Requests refused or given up without a usable upstream answer, by reason.",
		}, []string{"upstream", "reason"}),
		breaker: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_breaker_transitions_total",
			Help: "Circuit breaker state changes, by the state entered.",
		}, []string{"upstream", "to"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_provider_rate_limited_total",
			Help: "Provider 429s (and OpenAI 503 Slow Down), by cause: overshoot (the engine knew the exhausted limit and admitted past it) or unknown_limit.",
		}, []string{"upstream", "cause"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tokens_total",
			Help: "Tokens of finished requests: estimated before sending and actual from the usage report.",
		}, []string{"upstream", "direction", "kind"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_queue_wait_seconds",
			Help:    "Time from arrival to first upstream attempt.",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}, []string{"upstream", "priority"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_upstream_latency_seconds",
			Help:    "Upstream attempt latency to response headers (first content for streams).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"upstream"}),
	}
	m.abandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_streams_abandoned_total",
		Help: "Streams a client left before their end, by how they were settled: usage (read on to the usage the provider bills) or worst_case (cut first: charged input and max_tokens).",
	}, []string{"upstream", "settled"})
	reg.MustRegister(m.abandoned)
	m.cached = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_cached_input_tokens_total",
		Help: "Input tokens of answered scheduled requests that the provider served from its prompt cache (Anthropic cache_read_input_tokens, OpenAI cached_tokens), by upstream and client.",
	}, []string{"upstream", "client"})
	reg.MustRegister(m.cached)
	reg.MustRegister(m.requests, m.passthrough, m.attempts, m.retries, m.shed, m.rateLimited, m.breaker, m.tokens, m.queueWait, m.latency,
		&snapshotCollector{v: v},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.pool = newPoolMetrics(reg, v)
	// Pre-create the per-upstream series so dashboards see zeros.
	for _, u := range v.upstreams {
		m.passthrough.WithLabelValues(u.Name)
		m.latency.WithLabelValues(u.Name)
	}
	m.routed = &routedTotals{}
	if jobs {
		m.jobs = newJobMetrics(reg, v.clock, v.log, v.order, m.routed)
	}
	m.admit = newAdmitMetrics(reg, v, m.pool, m.routed)
	return m
}

// request counts a scheduled request; priority is its class, or
// "unknown" when it was refused before its class was known.
func (m *metrics) request(upstream, endpoint, priority, outcome, client string) {
	m.requests.WithLabelValues(upstream, endpoint, priority, outcome, client).Inc()
}

// cachedTokens counts input tokens served from the provider's cache.
func (m *metrics) cachedTokens(upstream, client string, n int64) {
	m.cached.WithLabelValues(upstream, client).Add(float64(n))
}

func (m *metrics) passthroughRequest(upstream string) {
	m.passthrough.WithLabelValues(upstream).Inc()
}

// Observer returns the dispatch.Observer of upstream's engine: the
// Prometheus series and the dashboard's outcome counts.
func (v *View) Observer(upstream string) dispatch.Observer { return v.metrics.observer(upstream) }

func (m *metrics) observer(upstream string) dispatch.Observer {
	o := &upstreamObserver{m: m, upstream: upstream, latency: m.latency.WithLabelValues(upstream), live: m.live.upstream(upstream)}
	for c := range llm.NumPriorities {
		o.queueWait[c] = m.queueWait.WithLabelValues(upstream, llm.Priority(c).String())
	}
	for i, l := range [...][2]string{{"input", "estimated"}, {"output", "reserved"}, {"input", "actual"}, {"output", "actual"}} {
		o.tokens[i] = m.tokens.WithLabelValues(upstream, l[0], l[1])
	}
	return o
}

// upstreamObserver records one dispatcher's events. Each method is a few
// atomic adds: O(1), never blocking.
type upstreamObserver struct {
	m        *metrics
	upstream string
	live     *liveUpstream // the dashboard's counts (live.go)
	// The series every request touches, resolved once: a label lookup per
	// request costs more than the observation.
	queueWait [llm.NumPriorities]prometheus.Observer
	latency   prometheus.Observer
	tokens    [4]prometheus.Counter // input estimated, output reserved, input actual, output actual
}

var _ dispatch.Observer = (*upstreamObserver)(nil)

func (o *upstreamObserver) Enqueued(llm.Priority) {}

func (o *upstreamObserver) Admitted(class llm.Priority, queueWait time.Duration) {
	if o.live != nil {
		o.live.admitted.Add(1)
	}
	if !class.Valid() {
		o.m.queueWait.WithLabelValues(o.upstream, class.String()).Observe(queueWait.Seconds())
		return
	}
	o.queueWait[class].Observe(queueWait.Seconds())
}

func (o *upstreamObserver) Attempted(outcome llm.OutcomeKind, status int, latency time.Duration) {
	o.m.attempts.WithLabelValues(o.upstream, outcome.String(), statusLabel(status)).Inc()
	if o.live != nil {
		switch outcome {
		case llm.Success:
			o.live.success.Add(1)
		case llm.Rate:
			o.live.rate429.Add(1)
		case llm.Overload:
			o.live.over529.Add(1)
		default:
			// The dashboard's outcome rates show these three and sheds.
		}
	}
	o.latency.Observe(latency.Seconds())
}

func (o *upstreamObserver) Retried(outcome llm.OutcomeKind) {
	o.m.retries.WithLabelValues(o.upstream, outcome.String()).Inc()
}

func (o *upstreamObserver) Shed(_ llm.Priority, reason error) {
	o.m.shed.WithLabelValues(o.upstream, shedReason(reason)).Inc()
	if o.live != nil {
		o.live.shed.Add(1)
	}
}

func (o *upstreamObserver) RateLimited(overshoot bool) {
	cause := "unknown_limit"
	if overshoot {
		cause = "overshoot"
	}
	o.m.rateLimited.WithLabelValues(o.upstream, cause).Inc()
}

func (o *upstreamObserver) BreakerStateChanged(_, to flow.BreakerState) {
	o.m.breaker.WithLabelValues(o.upstream, to.String()).Inc()
}

func (o *upstreamObserver) Reconciled(est provider.Cost, actual llm.Usage) {
	o.tokens[0].Add(float64(max(est.InputTokens, 0)))
	o.tokens[1].Add(float64(max(est.OutputTokens, 0)))
	o.tokens[2].Add(float64(max(actual.InputTokens+actual.CacheCreationInputTokens+actual.CacheReadInputTokens, 0)))
	o.tokens[3].Add(float64(max(actual.OutputTokens, 0)))
}

// statusLabel keeps the status label to real HTTP codes.
func statusLabel(status int) string {
	if status < 100 || status > 599 {
		return "0"
	}
	return strconv.Itoa(status)
}

// abandonedStream counts a stream its client left, once the engine
// settled it.
func (m *metrics) abandonedStream(upstream string, resp *dispatch.Response) {
	settled := "worst_case"
	if end, ok := resp.End(); ok && end.HasUsage {
		settled = "usage"
	}
	m.abandoned.WithLabelValues(upstream, settled).Inc()
}

// shedReason maps the dispatcher's sentinels to label values.
func shedReason(err error) string {
	for _, r := range []struct {
		err   error
		label string
	}{
		{dispatch.ErrTooLarge, "too_large"},
		{dispatch.ErrShed, "predicted_wait"},
		{dispatch.ErrDeadline, "deadline"},
		{dispatch.ErrClientLimit, "client_limit"},
		{dispatch.ErrRetriesExhausted, "retries_exhausted"},
		{dispatch.ErrRetryBudget, "retry_budget"},
		{dispatch.ErrUnavailable, "unavailable"},
		{dispatch.ErrStopped, "stopped"},
	} {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}

// snapshotCollector turns the dispatchers' snapshots into gauges at scrape
// time, so nothing is sampled in the background.
type snapshotCollector struct{ v *View }

var (
	descQueued = prometheus.NewDesc("sluice_queue_length", "Requests waiting in the queue, by class.",
		[]string{"upstream", "priority"}, nil)
	descInFlight = prometheus.NewDesc("sluice_in_flight_requests", "Requests being sent or streamed upstream.",
		[]string{"upstream"}, nil)
	descConcLimit = prometheus.NewDesc("sluice_concurrency_limit", "Adaptive concurrency limit.",
		[]string{"upstream"}, nil)
	descBucketLevel = prometheus.NewDesc("sluice_bucket_level", "Quota bucket room available now (may be negative), by dimension.",
		[]string{"upstream", "dimension"}, nil)
	descBucketLimit = prometheus.NewDesc("sluice_bucket_limit_per_minute", "Quota limit Sluice holds itself to, by dimension.",
		[]string{"upstream", "dimension"}, nil)
	descBreaker = prometheus.NewDesc("sluice_breaker_state", "Circuit breaker state: 1 for the current state.",
		[]string{"upstream", "state"}, nil)
	descPaused = prometheus.NewDesc("sluice_paused_seconds", "Seconds until the upstream's rate-limit pause ends (0 when not paused).",
		[]string{"upstream"}, nil)
	descOldestWait = prometheus.NewDesc("sluice_queue_oldest_wait_seconds", "How long the longest-waiting queued request of each class has waited (0 when the class is empty).",
		[]string{"upstream", "priority"}, nil)
)

var breakerStates = []flow.BreakerState{flow.Closed, flow.Open, flow.HalfOpen}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descInFlight, descConcLimit, descBucketLevel, descBucketLimit, descBreaker, descPaused, descOldestWait} {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.v.clock.Now()
	for _, name := range c.v.order {
		e := c.v.engine(name)
		if e == nil {
			continue
		}
		snap := e.Snapshot()
		for p, n := range snap.Queued {
			ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(n), name, llm.Priority(p).String())
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(snap.InFlight), name)
		ch <- prometheus.MustNewConstMetric(descConcLimit, prometheus.GaugeValue, float64(snap.ConcurrencyLimit), name)
		for d, b := range snap.Buckets {
			if b.Capacity <= 0 {
				continue
			}
			dim := flow.Dim(d).String()
			ch <- prometheus.MustNewConstMetric(descBucketLevel, prometheus.GaugeValue, b.Level, name, dim)
			ch <- prometheus.MustNewConstMetric(descBucketLimit, prometheus.GaugeValue, b.Capacity, name, dim)
		}
		for _, st := range breakerStates {
			v := 0.0
			if snap.Breaker == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, name, st.String())
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, max(snap.PausedUntil.Sub(now).Seconds(), 0), name)
		for p, at := range e.Explain().OldestArrival {
			v := 0.0
			if !at.IsZero() {
				v = max(now.Sub(at).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(descOldestWait, prometheus.GaugeValue, v, name, llm.Priority(p).String())
		}
	}
}
