package opsview

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/upstream"
)

// Engine is what the view reads of an upstream's engine;
// *dispatch.Dispatcher implements it. An engine that does not (a test's
// fake) is listed with what the view knows without it.
type Engine interface {
	// Snapshot is the engine's queue, concurrency, bucket and breaker
	// state.
	Snapshot() dispatch.Snapshot
	// Explain says what the head of its queue waits on, and its
	// history (breaker changes, last 429 and 529).
	Explain() dispatch.Explain
	// Keys is its key pool's state.
	Keys() []dispatch.KeyState
}

// Admission is what the view reads of the admission layer;
// *admit.Layer implements it.
type Admission interface {
	// ClientLimits is each limited client's room on each upstream.
	ClientLimits(now time.Time) []admit.ClientLimitStatus
	// Spend is the clients' spend and budget windows.
	Spend(now time.Time) *admit.SpendStatus
	// Accounts is every client's budget windows (the budget gauges).
	Accounts(now time.Time) []quota.Account
}

// Cluster is what the view reads of this gateway's node of a cluster;
// *admit.Layer, which runs the node, implements it.
type Cluster interface {
	// ClusterStatus is the node's view; ok is false while the gateway
	// does not share its quotas.
	ClusterStatus() (st cluster.Status, ok bool)
}

// JobStore is what the view reads of the job store: the live counts and
// the paused upstreams (the sluice_jobs gauges, /v1/status) and the dead
// jobs (/v1/status); jobstore.Store implements it. A store that also
// reports its webhook outbox (DeliveryStats) feeds the webhook gauges.
type JobStore interface {
	CountLive(ctx context.Context, now time.Time) ([]jobstore.LiveCount, error)
	PausedUpstreams(ctx context.Context) ([]string, error)
	List(ctx context.Context, p jobstore.ListParams) (jobstore.JobPage, error)
}

// Config configures a View.
type Config struct {
	// Upstreams are the gateway's upstreams, in config order: the order
	// /v1/status, the history and the metrics list them in. Required.
	Upstreams []upstream.Config
	// Clients are the configured clients' names: the client label and
	// /v1/status's clients section name them, any other caller is
	// "other". Defaults to none.
	Clients []string
	// AnonymousClient is the name of a keyless caller of an open gateway,
	// labelled as itself. Defaults to none.
	AnonymousClient string
	// Registry is where the view registers its metrics. Defaults to a new
	// registry (Registry returns it).
	Registry *prometheus.Registry
	// Jobs is set when the gateway runs a job queue: the job metrics are
	// registered and JobsObserver returns their observer. Defaults to
	// false.
	Jobs bool
	// HistoryInterval is the time between two history samples. Defaults
	// to HistoryIntervalDefault.
	HistoryInterval time.Duration
	// HistorySamples is how many samples the history keeps. Defaults to
	// HistorySamplesDefault.
	HistorySamples int
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// Logger receives the warnings of failed store reads. Defaults to a
	// discarding logger.
	Logger *slog.Logger
}

// View is the operator read model of one gateway (see the package doc).
// Make one with New and give it what it reads with Bind, before the first
// request. It is safe for concurrent use.
type View struct {
	clock     clock.Clock
	log       *slog.Logger
	upstreams []upstream.Config
	order     []string
	live      *live
	history   *HistorySampler
	metrics   *metrics

	// What Bind gives; read-only afterwards.
	engines   map[string]Engine
	admission Admission
	cluster   Cluster

	jobsMu   sync.Mutex
	jobStore JobStore // nil while the job queue is not running
	// statusJobs caches /v1/status's job counts (status_why.go).
	statusJobs statusJobs
}

// New returns the view of a gateway with cfg's upstreams, its metrics
// registered on cfg.Registry.
func New(cfg Config) *View {
	v := &View{
		clock:     clock.Or(cfg.Clock),
		log:       cfg.Logger,
		upstreams: cfg.Upstreams,
		engines:   map[string]Engine{},
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	for _, u := range cfg.Upstreams {
		v.order = append(v.order, u.Name)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	v.live = newLive(v.order, cfg.Clients, cfg.AnonymousClient)
	v.history = newHistorySampler(v, v.clock, cmp.Or(cfg.HistoryInterval, HistoryIntervalDefault),
		cmp.Or(cfg.HistorySamples, HistorySamplesDefault))
	v.metrics = newMetrics(reg, v, cfg.Jobs)
	return v
}

// Sources are what a View reads, given once they are built (Bind).
type Sources struct {
	// Engines are the upstreams' engines by name; an upstream missing
	// here has none the view can read.
	Engines map[string]Engine
	// Admission is the admission layer. Defaults to none (no client
	// limits, spend or budget gauges).
	Admission Admission
	// Cluster is the gateway's node of a cluster. Defaults to none.
	Cluster Cluster
}

// Bind gives the view what it reads. It is called once, before the first
// request and before the history sampler starts.
func (v *View) Bind(src Sources) {
	for name, e := range src.Engines {
		if e != nil {
			v.engines[name] = e
		}
	}
	v.admission, v.cluster = src.Admission, src.Cluster
}

// Registry is the registry the view's metrics are on.
func (v *View) Registry() *prometheus.Registry { return v.metrics.registry }

// SetClients names the clients in force (the config's and the admin
// API's), after a reload or a change of the runtime clients: the client
// label and /v1/status's clients section name them.
func (v *View) SetClients(names []string) { v.live.clients.setConfigured(names) }

// Sampler is the history sampler: the gateway starts and stops it
// (lifecycle.Service).
func (v *View) Sampler() *HistorySampler { return v.history }

// History is GET /v1/status/history's body.
func (v *View) History() HistoryResponse { return v.history.history() }

// SetJobStore sets the job store the view reads, or nil when the job
// queue stops. Once it returns nil, no scrape reads the store (a scrape's
// read in progress is waited for, at most JobCountTimeout).
func (v *View) SetJobStore(st JobStore) {
	v.jobsMu.Lock()
	v.jobStore = st
	v.jobsMu.Unlock()
	if v.metrics.jobs != nil {
		v.metrics.jobs.counts.setStore(st)
	}
}

func (v *View) jobs() JobStore {
	v.jobsMu.Lock()
	defer v.jobsMu.Unlock()
	return v.jobStore
}

// engine returns upstream name's engine, or nil.
func (v *View) engine(name string) Engine { return v.engines[name] }

// Serving records a scheduled request being served on upstream (queued,
// in flight or streaming) until done is called: /v1/status lists the
// oldest. client is the authenticated client's name, priority the class
// it asked for.
func (v *View) Serving(upstream, id, client, priority string, start time.Time) (done func()) {
	u := v.live.upstream(upstream)
	r := &openRequest{id: id, client: client, start: start}
	u.opened(r, priority)
	return func() { u.closed(r) }
}

// Answer is a scheduled request once answered.
type Answer struct {
	Upstream string
	// Client is the authenticated client's name ("" before
	// authentication); Priority the class it was served in.
	Client, Priority string
	// Start is when it arrived.
	Start time.Time
	// Succeeded is set when it was answered 2xx.
	Succeeded bool
	// TokensIn and TokensOut are the usage the provider reported, and
	// TokensCached the input it served from its prompt cache.
	TokensIn, TokensOut, TokensCached int64
}

// Answered records a scheduled request once answered: its latency per
// class (the dashboard's quantiles) and its client's usage. (Outcomes per
// second count upstream attempts, jobs' included: the engines' observers
// record them.)
func (v *View) Answered(a Answer) {
	now := v.clock.Now()
	if p, err := llm.ParsePriority(a.Priority); err == nil {
		v.live.upstream(a.Upstream).latency(p, now.Sub(a.Start))
	}
	v.live.clients.record(a, now)
	if a.TokensCached > 0 {
		if u := v.live.upstream(a.Upstream); u != nil {
			u.cached.Add(a.TokensCached)
		}
		v.metrics.cachedTokens(a.Upstream, v.live.clientLabel(a.Client), a.TokensCached)
	}
}

// CountRequest counts a scheduled request's outcome in
// sluice_requests_total; endpoint is one of a bounded set (the provider's
// endpoint names, or other), client is the authenticated client's name,
// counted under its bounded label.
func (v *View) CountRequest(upstream, endpoint, priority, outcome, client string) {
	v.metrics.request(upstream, endpoint, priority, outcome, v.live.clientLabel(client))
}

// CountPassthrough counts a request forwarded unscheduled.
func (v *View) CountPassthrough(upstream string) { v.metrics.passthroughRequest(upstream) }

// StreamAbandoned counts a stream its client left, once the engine
// settled it (resp ended).
func (v *View) StreamAbandoned(upstream string, resp *dispatch.Response) {
	v.metrics.abandonedStream(upstream, resp)
}
