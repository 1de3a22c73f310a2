package opsview

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// The job queue's metrics: jobMetrics is the Prometheus adapter of
// jobs.Observer (counters and histograms of what this gateway's job runtime
// did), and jobCounts reads the queue's depth from the store on scrape.

// Bounds on the store reads behind the queue-depth gauges.
const (
	// JobCountMaxAge is how long the job counts behind sluice_jobs are
	// reused: scrapes within it do not query the store.
	JobCountMaxAge = 5 * time.Second
	// JobCountTimeout bounds one read of the counts; a scrape waits at most
	// this long for the store, then reports the last values it read.
	JobCountTimeout = 2 * time.Second
)

// Histogram buckets, in seconds.
var (
	// jobQueueWaitBuckets run from a job handed to an idle worker at once
	// (milliseconds) to the tail of a nightly batch (hours).
	jobQueueWaitBuckets = []float64{.001, .01, .1, .5, 1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 28800}
	// jobRunBuckets run from a short completion to a long generation; an
	// attempt includes the dispatcher's wait for quota and its in-call
	// retries.
	jobRunBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800}
)

// Label values of sluice_jobs_rescued_total's outcome.
const (
	rescueRequeued = "requeued" // an expired lease, back to the queue
	rescueDead     = "dead"     // an expired lease past max_stalls
	rescueExpired  = "expired"  // queued past its deadline
)

// finishedStates are the values of sluice_jobs_finished_total's state.
var finishedStates = []jobstore.State{jobstore.StateSucceeded, jobstore.StateDead, jobstore.StateCanceled}

// jobMetrics implements jobs.Observer. Each method is a few atomic adds:
// O(1), never blocking. Labels are bounded: upstream names come from the
// config, states and outcomes are enums.
type jobMetrics struct {
	submitted *prometheus.CounterVec
	finished  *prometheus.CounterVec
	attempts  *prometheus.CounterVec
	rescued   *prometheus.CounterVec
	webhooks  *prometheus.CounterVec
	queueWait *prometheus.HistogramVec
	run       *prometheus.HistogramVec
	counts    *jobCounts
	// The routing to providers' Batch APIs (issue 26).
	batchGroups *prometheus.CounterVec
	batchLines  *prometheus.CounterVec
	batchSpend  *prometheus.CounterVec
	batchSaved  *prometheus.CounterVec
	// routed are the same figures per upstream for /v1/status (shared
	// with the admission layer's metrics, which add the flex tier's).
	routed *routedTotals
}

// routedTotals sums, per upstream, the lines answered through the
// provider's Batch API and the answers served in the flex tier, and what
// they cost, since the gateway started.
type routedTotals struct {
	mu sync.Mutex
	by map[string]*BatchRouteStatus
}

func (r *routedTotals) add(upstream string, fn func(*BatchRouteStatus)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]*BatchRouteStatus{}
	}
	t := r.by[upstream]
	if t == nil {
		t = &BatchRouteStatus{}
		r.by[upstream] = t
	}
	fn(t)
}

// get returns a copy of upstream's totals, nil when it routed nothing.
func (r *routedTotals) get(upstream string) *BatchRouteStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.by[upstream]
	if t == nil {
		return nil
	}
	c := *t
	c.SpentUSD, c.StandardUSD = roundUSD(c.SpentUSD), roundUSD(c.StandardUSD)
	c.FlexSpentUSD, c.FlexStandardUSD = roundUSD(c.FlexSpentUSD), roundUSD(c.FlexStandardUSD)
	c.FlexSavedUSD = roundUSD(c.FlexStandardUSD - c.FlexSpentUSD)
	c.SavedUSD = roundUSD(c.StandardUSD - c.SpentUSD + c.FlexSavedUSD)
	return &c
}

// roundUSD rounds to a millionth of a dollar, the float sums' noise off.
func roundUSD(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// BatchRouteStatus is what the upstream's work that could wait cost, since
// this gateway started: the lines of its provider's Batch API it wrote
// back (docs/jobs-api.md) and what the answered ones cost at the batch
// price, against what the synchronous path would have cost; the answers
// served in OpenAI's flex tier, at the flex price, against the standard
// tier's. SavedUSD is both differences.
type BatchRouteStatus struct {
	Succeeded   int64   `json:"lines_succeeded"`
	Released    int64   `json:"lines_released"`
	Errored     int64   `json:"lines_errored"`
	Held        int64   `json:"lines_held"`
	SpentUSD    float64 `json:"spent_usd"`
	StandardUSD float64 `json:"standard_usd"`
	// FlexAnswers counts the answers served in the flex tier (jobs the
	// flex rule sent there, and live requests that asked for it).
	FlexAnswers     int64   `json:"flex_answers"`
	FlexSpentUSD    float64 `json:"flex_spent_usd"`
	FlexStandardUSD float64 `json:"flex_standard_usd"`
	FlexSavedUSD    float64 `json:"flex_saved_usd"`
	SavedUSD        float64 `json:"saved_usd"`
}

var _ jobs.Observer = (*jobMetrics)(nil)

// JobsObserver returns the job runtime's observer, or nil when the view
// was made without Config.Jobs (no job queue, no job metrics).
func (v *View) JobsObserver() jobs.Observer {
	if v.metrics.jobs == nil {
		return nil
	}
	return v.metrics.jobs
}

// JobsAPIObserver is the job API's observer (its submissions), nil
// without the queue's metrics.
func (v *View) JobsAPIObserver() jobsapi.Observer {
	if v.metrics.jobs == nil {
		return nil
	}
	return v.metrics.jobs
}

func newJobMetrics(reg *prometheus.Registry, clk clock.Clock, log *slog.Logger, upstreams []string, routed *routedTotals) *jobMetrics {
	m := &jobMetrics{routed: routed,
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_jobs_submitted_total",
			Help: "Jobs queued through this gateway's API (single jobs and batch lines; idempotent replays excluded).",
		}, []string{"upstream"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_jobs_finished_total",
			Help: "Jobs this gateway finished, by final state (the rescuer's kills are in sluice_jobs_rescued_total).",
		}, []string{"upstream", "state"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_job_attempts_total",
			Help: "Job attempts this gateway's workers made, by how they ended.",
		}, []string{"upstream", "outcome"}),
		rescued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_jobs_rescued_total",
			Help: "Jobs this gateway's lease rescuer took back: requeued or dead after an expired lease, or expired past their deadline while queued.",
		}, []string{"outcome"}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_webhook_deliveries_total",
			Help: "Webhook POSTs by outcome: delivered (2xx), failed (retried later), gave_up (failed at the end of the retry window: the delivery is marked failed), abandoned (cut off by this gateway's shutdown; due again at once).",
		}, []string{"outcome"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_job_queue_wait_seconds",
			Help:    "Time from a job becoming available (submitted, or its backoff over) to this gateway starting its attempt.",
			Buckets: jobQueueWaitBuckets,
		}, []string{"upstream"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_job_run_seconds",
			Help:    "Duration of one job attempt, from its start to its result recorded (quota waits and in-call retries included).",
			Buckets: jobRunBuckets,
		}, []string{"upstream"}),
		counts: newJobCounts(clk, log, upstreams),
		batchGroups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_batch_groups_total",
			Help: "Groups of jobs routed to a provider's Batch API, by event: formed, submitted, refused (queue full), pulled_back (canceled for a deadline), ended.",
		}, []string{"upstream", "event"}),
		batchLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_batch_lines_total",
			Help: "Lines of provider batches written back to their jobs, by outcome (succeeded, errored, canceled, expired; held: never sent, the admission layer held its job back).",
		}, []string{"upstream", "outcome"}),
		batchSpend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_batch_spend_usd_total",
			Help: "What the lines answered through providers' Batch APIs cost, at the batch price (USD).",
		}, []string{"upstream"}),
		batchSaved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_batch_saved_usd_total",
			Help: "Money saved by routing jobs to providers' Batch APIs: what the synchronous path would have cost less what the batch cost (USD).",
		}, []string{"upstream"}),
	}
	reg.MustRegister(m.submitted, m.finished, m.attempts, m.rescued, m.webhooks, m.queueWait, m.run, m.counts,
		m.batchGroups, m.batchLines, m.batchSpend, m.batchSaved)
	// Pre-create the series so dashboards see zeros.
	for _, u := range upstreams {
		m.submitted.WithLabelValues(u)
		for _, st := range finishedStates {
			m.finished.WithLabelValues(u, string(st))
		}
		for _, o := range jobs.AttemptOutcomes {
			m.attempts.WithLabelValues(u, string(o))
		}
		m.queueWait.WithLabelValues(u)
		m.run.WithLabelValues(u)
	}
	for _, o := range []string{rescueRequeued, rescueDead, rescueExpired} {
		m.rescued.WithLabelValues(o)
	}
	for _, o := range jobs.WebhookOutcomes {
		m.webhooks.WithLabelValues(string(o))
	}
	return m
}

func (m *jobMetrics) Submitted(upstream string, n int) {
	m.submitted.WithLabelValues(upstream).Add(float64(max(n, 0)))
}

func (m *jobMetrics) Started(upstream string, queueWait time.Duration) {
	m.queueWait.WithLabelValues(upstream).Observe(queueWait.Seconds())
}

func (m *jobMetrics) Attempted(upstream string, outcome jobs.AttemptOutcome, d time.Duration) {
	m.attempts.WithLabelValues(upstream, string(outcome)).Inc()
	m.run.WithLabelValues(upstream).Observe(d.Seconds())
}

func (m *jobMetrics) Finished(upstream string, state jobstore.State, n int) {
	m.finished.WithLabelValues(upstream, string(state)).Add(float64(max(n, 0)))
}

func (m *jobMetrics) Rescued(res jobstore.RescueResult) {
	m.rescued.WithLabelValues(rescueRequeued).Add(float64(max(res.Requeued, 0)))
	m.rescued.WithLabelValues(rescueDead).Add(float64(max(res.Dead, 0)))
	m.rescued.WithLabelValues(rescueExpired).Add(float64(max(res.Expired, 0)))
}

func (m *jobMetrics) Webhook(outcome jobs.WebhookOutcome) {
	m.webhooks.WithLabelValues(string(outcome)).Inc()
}

func (m *jobMetrics) BatchGroup(upstream string, event jobs.BatchGroupEvent, _ int) {
	m.batchGroups.WithLabelValues(upstream, string(event)).Inc()
}

func (m *jobMetrics) BatchLines(upstream string, outcome jobs.BatchLineOutcome, n int) {
	m.batchLines.WithLabelValues(upstream, string(outcome)).Add(float64(max(n, 0)))
	m.routed.add(upstream, func(t *BatchRouteStatus) {
		switch outcome {
		case jobs.LineSucceeded:
			t.Succeeded += int64(n)
		case jobs.LineErrored:
			t.Errored += int64(n)
		case jobs.LineCanceled, jobs.LineExpired:
			t.Released += int64(n)
		case jobs.LineHeld:
			t.Held += int64(n)
		}
	})
}

func (m *jobMetrics) BatchSpend(upstream string, batchUSD, standardUSD float64) {
	m.batchSpend.WithLabelValues(upstream).Add(max(batchUSD, 0))
	m.batchSaved.WithLabelValues(upstream).Add(max(standardUSD-batchUSD, 0))
	m.routed.add(upstream, func(t *BatchRouteStatus) {
		t.SpentUSD += max(batchUSD, 0)
		t.StandardUSD += max(standardUSD, batchUSD, 0)
	})
}

// liveCounter is what jobCounts reads: jobstore.Store implements it.
type liveCounter interface {
	CountLive(ctx context.Context, now time.Time) ([]jobstore.LiveCount, error)
	PausedUpstreams(ctx context.Context) ([]string, error)
}

// deliveryCounter is what jobCounts reads for the webhook gauges, when the
// store has an outbox: jobstore.Store implements it.
type deliveryCounter interface {
	DeliveryStats(ctx context.Context) (jobstore.DeliveryStats, error)
}

var (
	descWebhookPending = prometheus.NewDesc("sluice_webhook_pending",
		"Webhook deliveries pending in the store's outbox (not yet accepted by their receiver, still inside their retry window), read with sluice_jobs.",
		nil, nil)
	descWebhookOldest = prometheus.NewDesc("sluice_webhook_oldest_pending_age_seconds",
		"Age of the oldest pending webhook delivery, from its job's finish; 0 when none is pending.",
		nil, nil)
	descJobs = prometheus.NewDesc("sluice_jobs",
		fmt.Sprintf("Live jobs in the queue by state (queued, running), read from the store at most every %v: the whole queue's, so every gateway sharing a store reports the same values.", JobCountMaxAge),
		[]string{"upstream", "state"}, nil)
	descJobsDelayed = prometheus.NewDesc("sluice_jobs_delayed",
		"Queued jobs not available yet: waiting out a retry backoff or a rate-limit hint (included in sluice_jobs{state=\"queued\"}).",
		[]string{"upstream"}, nil)
	descJobsPaused = prometheus.NewDesc("sluice_job_upstream_paused",
		"1 while the upstream's job queue is paused through the API (POST /v1/upstreams/{name}/pause), else 0.",
		[]string{"upstream"}, nil)
	descJobCountErrors = prometheus.NewDesc("sluice_jobs_count_errors_total",
		"Failed store reads behind sluice_jobs and sluice_job_upstream_paused (the last values read are reported meanwhile).",
		nil, nil)
)

// jobCounts collects the queue-depth gauges on scrape, so nothing is
// sampled in the background. It reads the store at most once per maxAge
// (concurrent scrapes share the read), each read bounded by timeout; a
// failed read keeps the last values and counts the error (in the same
// scrape), so a scrape never fails because of the store. Before the job
// queue starts, and after it stops, it reports no gauges.
type jobCounts struct {
	clock     clock.Clock
	log       *slog.Logger
	upstreams []string // reported even when they have no job
	maxAge    time.Duration
	timeout   time.Duration

	mu       sync.Mutex
	store    liveCounter // nil while the job queue is not running
	errors   int         // failed store reads, reported by the scrape that saw them
	readAt   time.Time   // when the last read was tried; zero before the first
	live     []jobstore.LiveCount
	liveOK   bool
	paused   []string
	pausedOK bool
	hooks    jobstore.DeliveryStats
	hooksOK  bool
}

func newJobCounts(clk clock.Clock, log *slog.Logger, upstreams []string) *jobCounts {
	return &jobCounts{clock: clk, log: log, upstreams: slices.Clone(upstreams), maxAge: JobCountMaxAge, timeout: JobCountTimeout}
}

// setStore sets the store to read, or nil when the job queue stops. It
// waits for a scrape's read in progress (at most timeout), so once it
// returns nil no scrape reads the store.
func (c *jobCounts) setStore(st liveCounter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store = st
}

func (c *jobCounts) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descJobsDelayed, descJobsPaused, descJobCountErrors, descWebhookPending, descWebhookOldest} {
		ch <- d
	}
}

func (c *jobCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.clock.Now(); c.store != nil && (c.readAt.IsZero() || now.Sub(c.readAt) >= c.maxAge) {
		c.readAt = now
		c.read(c.store, now)
	}
	ch <- prometheus.MustNewConstMetric(descJobCountErrors, prometheus.CounterValue, float64(c.errors))
	if c.store == nil {
		return // the job queue is not running
	}
	if c.liveOK {
		byName := map[string]jobstore.LiveCount{}
		found := make([]string, 0, len(c.live))
		for _, l := range c.live {
			byName[l.Upstream] = l
			found = append(found, l.Upstream)
		}
		for _, u := range c.names(found) {
			l := byName[u]
			ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(l.Queued), u, string(jobstore.StateQueued))
			ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(l.Running), u, string(jobstore.StateRunning))
			ch <- prometheus.MustNewConstMetric(descJobsDelayed, prometheus.GaugeValue, float64(l.Delayed), u)
		}
	}
	if c.hooksOK {
		age := 0.0
		if !c.hooks.OldestPending.IsZero() {
			age = max(c.clock.Now().Sub(c.hooks.OldestPending).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(descWebhookPending, prometheus.GaugeValue, float64(c.hooks.Pending))
		ch <- prometheus.MustNewConstMetric(descWebhookOldest, prometheus.GaugeValue, age)
	}
	if c.pausedOK {
		for _, u := range c.names(c.paused) {
			v := 0.0
			if slices.Contains(c.paused, u) {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descJobsPaused, prometheus.GaugeValue, v, u)
		}
	}
}

// read refreshes the counts from st; c.mu is held.
func (c *jobCounts) read(st liveCounter, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if live, err := st.CountLive(ctx, now); err != nil {
		c.errors++
		c.log.Warn("counting jobs for /metrics", "err", err)
	} else {
		c.live, c.liveOK = live, true
	}
	if paused, err := st.PausedUpstreams(ctx); err != nil {
		c.errors++
		c.log.Warn("listing paused upstreams for /metrics", "err", err)
	} else {
		c.paused, c.pausedOK = paused, true
	}
	if dc, ok := st.(deliveryCounter); ok {
		if stats, err := dc.DeliveryStats(ctx); err != nil {
			c.errors++
			c.log.Warn("counting pending webhooks for /metrics", "err", err)
		} else {
			c.hooks, c.hooksOK = stats, true
		}
	}
}

// names returns the configured upstreams, then those of found that are
// not configured (jobs queued under an earlier config), sorted.
func (c *jobCounts) names(found []string) []string {
	var extra []string
	for _, u := range found {
		if !slices.Contains(c.upstreams, u) && !slices.Contains(extra, u) {
			extra = append(extra, u)
		}
	}
	slices.Sort(extra)
	return append(slices.Clone(c.upstreams), extra...)
}
