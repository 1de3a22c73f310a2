package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// Defaults for Config fields.
const (
	// LeaseForDefault is how long a lease lasts without a heartbeat.
	LeaseForDefault = 30 * time.Second
	// MaxInFlightPerUpstreamDefault is how many admissions per upstream a
	// worker keeps outstanding (waiting in the engine, or calls in flight).
	MaxInFlightPerUpstreamDefault = 64
	// ClaimBatchDefault is the most jobs claimed in one store call.
	ClaimBatchDefault = 32
	// PollIntervalDefault is the longest an idle worker sleeps before
	// looking at the store again.
	PollIntervalDefault = time.Second
	// RetryBaseDelayDefault is the first requeue backoff ceiling of a job
	// whose attempt burnt.
	RetryBaseDelayDefault = 2 * time.Second
	// RetryMaxDelayDefault caps the requeue backoff.
	RetryMaxDelayDefault = 5 * time.Minute
	// WebhookRetryForDefault is how long a webhook delivery is retried
	// before it is marked failed.
	WebhookRetryForDefault = 24 * time.Hour
	// WebhookTimeoutDefault bounds one webhook POST.
	WebhookTimeoutDefault = 10 * time.Second
	// WebhookBaseDelayDefault is the first webhook retry's backoff
	// ceiling.
	WebhookBaseDelayDefault = time.Second
	// WebhookMaxDelayDefault caps the webhook retry backoff.
	WebhookMaxDelayDefault = time.Hour
	// WebhookConcurrencyDefault is how many webhook POSTs one gateway runs
	// at once.
	WebhookConcurrencyDefault = 16
	// MaxStallsDefault is how many expired leases a job survives.
	MaxStallsDefault = jobstore.MaxStallsDefault
	// SpoolMaxBytesDefault bounds the result spool's bytes.
	SpoolMaxBytesDefault = 1 << 30
	// SpoolMaxEntriesDefault bounds the result spool's entries.
	SpoolMaxEntriesDefault = 10_000
)

// Dispatcher is what the runtime needs from an upstream's engine: an
// admission (a ticket) in a priority class, waited for in the engine's
// scheduler or admitted only at once, each good for exactly one upstream
// call. *dispatch.Dispatcher implements it.
type Dispatcher interface {
	Acquire(ctx context.Context, p dispatch.AcquireParams) (*dispatch.Ticket, error)
	TryAcquire(p dispatch.AcquireParams) (*dispatch.Ticket, bool)
}

// Config configures a Service.
type Config struct {
	// Settings are the user-settable fields (the gateway's jobs: section):
	// lease, in-flight cap, attempts, stalls, requeue backoff, webhook
	// signing and delivery, retention, spool.
	Settings
	// Store is the durable job store. Required. The Service does not close
	// it.
	Store jobstore.Store
	// Dispatchers are the engines by upstream name; a job may only name an
	// upstream listed here. Required: at least one.
	Dispatchers map[string]Dispatcher
	// FlexMinSlack names the OpenAI upstreams whose jobs go in the flex
	// service tier (upstream.Flex.Enabled), each with the slack a job's
	// deadline must leave for it (flex.go). Defaults to none.
	FlexMinSlack map[string]time.Duration
	// Protocols are the upstreams' wire protocols, one per dispatcher.
	// Required.
	Protocols map[string]llm.Protocol
	// Admission is the admission layer (internal/admit): where each
	// job's call goes (its upstream or a fallback, by the same rule as a
	// live request's) and whether its client's budget and own limits let
	// it go now. Defaults to nil: every call goes to its own upstream,
	// unlimited.
	Admission Admission
	// BatchRoutes route the jobs of some classes of an upstream to its
	// provider's Batch API (upstream.Config.Batch), by upstream name; an
	// upstream not listed (or whose route is not enabled) routes nothing.
	// Defaults to none.
	BatchRoutes map[string]upstream.BatchRoute
	// BatchAPIs are the providers' Batch APIs of the routed upstreams.
	// Required for every enabled route.
	BatchAPIs map[string]BatchAPI
	// BatchPricer prices the lines of provider batches and tells the
	// budgets. Defaults to Admission when it implements BatchPricer;
	// required with a route.
	BatchPricer BatchPricer
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// Owner names this process's workers in leases. Defaults to
	// "host-pid".
	Owner string
	// HeartbeatEvery is how often a running job's lease is renewed; it must
	// be shorter than LeaseFor. Defaults to LeaseFor/3.
	HeartbeatEvery time.Duration
	// ClaimBatch is the most jobs claimed in one store call. Defaults to
	// ClaimBatchDefault (capped by MaxInFlightPerUpstream).
	ClaimBatch int
	// PollInterval is the longest an idle worker sleeps before looking at
	// the store again. Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// RescueInterval is how often the built-in jobstore.JobRescuer takes back
	// expired leases; negative disables it (run one elsewhere). Defaults
	// to LeaseFor/2.
	RescueInterval time.Duration
	// WebhookClient sends webhooks. Defaults to a client with
	// http.DefaultTransport.
	WebhookClient *http.Client
	// WebhookConcurrency is how many POSTs this gateway runs at once.
	// Defaults to WebhookConcurrencyDefault.
	WebhookConcurrency int
	// SpoolMaxBytes bounds the bytes the spool holds; a result that does
	// not fit is dropped (and logged). Defaults to SpoolMaxBytesDefault.
	SpoolMaxBytes int64
	// SpoolMaxEntries bounds the results the spool holds. Defaults to
	// SpoolMaxEntriesDefault.
	SpoolMaxEntries int
	// Logger logs failures the runtime cannot return to anyone. Defaults
	// to slog.Default().
	Logger *slog.Logger
	// Observer receives the runtime's events for metrics: attempts and
	// their outcomes, finished jobs, rescues, webhooks. Defaults to
	// NopObserver (no metrics).
	Observer Observer
	// Tracer makes a span per job attempt (the engine hangs the attempt's
	// upstream call under it). Defaults to a no-op tracer.
	Tracer trace.Tracer
}

// Admission is the admission layer as the job runtime asks it;
// *admit.Layer implements it.
type Admission interface {
	// RouteJobs is where the jobs of class on upstream go now: their
	// upstream or a fallback, and a fallback for the jobs whose deadline
	// the upstream's predicted wait would miss (ok false: the upstream has
	// no engine).
	RouteJobs(upstream string, class llm.Priority, client string, cost provider.Cost) (admit.JobRoute, bool)
	// Reroute is where a call whose attempt on from failed with err goes
	// at once: a fallback, when err is an outage (ok false: it stays).
	Reroute(from admit.Target, class llm.Priority, client string, cost provider.Cost, deadline time.Time, err error) (admit.Target, bool)
	// AdmitNow admits a call to t at once: an *admit.RefusalError from its
	// client's budget, an *admit.HeldError from its client's own limit.
	AdmitNow(t admit.Target, req *dispatch.Request) (admit.Settler, error)
}

// WithDefaults returns c with every unset field filled in. It is pure.
func (c Config) WithDefaults() Config {
	c.Clock = clock.Or(c.Clock)
	if c.Owner == "" {
		host, _ := os.Hostname()
		c.Owner = cmp.Or(host, "sluice") + "-" + strconv.Itoa(os.Getpid())
	}
	c.Settings = c.Settings.WithDefaults()
	c.HeartbeatEvery = cmp.Or(c.HeartbeatEvery, c.LeaseFor/3)
	c.ClaimBatch = min(cmp.Or(c.ClaimBatch, ClaimBatchDefault), c.MaxInFlightPerUpstream)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.RescueInterval = cmp.Or(c.RescueInterval, c.LeaseFor/2)
	if c.WebhookClient == nil {
		c.WebhookClient = &http.Client{Transport: http.DefaultTransport}
	}
	c.WebhookConcurrency = cmp.Or(c.WebhookConcurrency, WebhookConcurrencyDefault)
	c.SpoolMaxBytes = cmp.Or(c.SpoolMaxBytes, SpoolMaxBytesDefault)
	c.SpoolMaxEntries = cmp.Or(c.SpoolMaxEntries, SpoolMaxEntriesDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.BatchPricer == nil {
		if p, ok := c.Admission.(BatchPricer); ok {
			c.BatchPricer = p
		}
	}
	return c
}

// Validate reports the first invalid field of c once defaulted: one of
// the Settings by its YAML path (Settings.Validate), any other by its Go
// name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.Store == nil {
		return errors.New("Store is required")
	}
	if len(c.Dispatchers) == 0 {
		return errors.New("Dispatchers: at least one upstream is required")
	}
	for name, d := range c.Dispatchers {
		if d == nil {
			return fmt.Errorf("Dispatchers[%s] is nil", name)
		}
		p, ok := c.Protocols[name]
		if !ok {
			return fmt.Errorf("Protocols[%s] is missing", name)
		}
		if _, err := llm.ParseProtocol(string(p)); err != nil {
			return fmt.Errorf("Protocols[%s]: %w", name, err)
		}
	}
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	for name, r := range c.BatchRoutes {
		if !r.Enabled() {
			continue
		}
		switch {
		case c.Dispatchers[name] == nil:
			return fmt.Errorf("BatchRoutes[%s]: no such upstream", name)
		case c.BatchAPIs[name] == nil:
			return fmt.Errorf("BatchAPIs[%s] is missing (the upstream routes jobs to its Batch API)", name)
		case c.BatchPricer == nil:
			return fmt.Errorf("BatchPricer is required with BatchRoutes[%s]", name)
		}
	}
	switch {
	case c.HeartbeatEvery <= 0 || c.HeartbeatEvery >= c.LeaseFor:
		return fmt.Errorf("HeartbeatEvery must be in (0, LeaseFor=%v), got %v", c.LeaseFor, c.HeartbeatEvery)
	case c.ClaimBatch < 1:
		return fmt.Errorf("ClaimBatch must be >= 1, got %d", c.ClaimBatch)
	case c.PollInterval <= 0:
		return fmt.Errorf("PollInterval must be positive, got %v", c.PollInterval)
	case c.WebhookConcurrency < 1:
		return fmt.Errorf("WebhookConcurrency must be >= 1, got %d", c.WebhookConcurrency)
	case c.SpoolMaxBytes < 1:
		return fmt.Errorf("SpoolMaxBytes must be >= 1, got %d", c.SpoolMaxBytes)
	case c.SpoolMaxEntries < 1:
		return fmt.Errorf("SpoolMaxEntries must be >= 1, got %d", c.SpoolMaxEntries)
	}
	return nil
}
