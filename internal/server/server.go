package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clientsapi"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/storelink"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// ReadHeaderTimeoutDefault bounds how long a client may take to send its
// request headers (slowloris protection): Config.ReadHeaderTimeout.
const ReadHeaderTimeoutDefault = 30 * time.Second

// engine is what the server needs from an upstream's dispatcher: the real
// one is *dispatch.Dispatcher; tests use a fake.
type engine interface {
	Do(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error)
}

// Option configures a Server beyond its Config.
type Option func(*options)

type options struct {
	clock          clock.Clock
	logger         *slog.Logger
	transport      http.RoundTripper
	engines        map[string]engine
	store          jobstore.Store
	noListen       bool
	tracer         trace.TracerProvider
	clusterBackend admit.ClusterBackend // WithClusterBackend (cluster.go)
	sharedStore    bool                 // WithSharedStore (jobs.go)
}

// WithClock sets the clock used for deadlines and timings. Defaults to the
// wall clock.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger. Defaults to slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithTransport sets the HTTP transport used to reach the upstreams, for
// both scheduled and passed-through requests. Defaults to a clone of
// http.DefaultTransport.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.transport = rt } }

// WithoutListener makes Start start the engines and the job queue but not
// listen: the gateway is then used in-process through Handler (sluice batch
// run --store does this). Defaults to listening on Config.Listen.
func WithoutListener() Option { return func(o *options) { o.noListen = true } }

// withEngine replaces the dispatcher of one upstream (tests).
func withEngine(upstream string, e engine) Option {
	return func(o *options) {
		if o.engines == nil {
			o.engines = map[string]engine{}
		}
		o.engines[upstream] = e
	}
}

// upstream is one configured provider API as the handlers see it.
type upstream struct {
	cfg      upcfg.Config
	target   *url.URL
	engine   engine
	proxy    *httputil.ReverseProxy
	batchAPI jobs.BatchAPI // the provider's Batch API for routed jobs (nil: batch: routes none)
}

// Server is the gateway: HTTP routes in front of one dispatcher per
// upstream. Create it with New, then Start and Stop it, or mount Handler
// in your own http.Server.
type Server struct {
	cfg       Config
	clock     clock.Clock
	log       *slog.Logger
	tracer    trace.Tracer
	upstreams map[string]*upstream
	order     []string // upstream names in config order
	// clients are the clients in force: the config's (Reload changes
	// them) and the admin API's (the poller changes them).
	clients    *clients.Registry
	poller     atomic.Pointer[clients.Poller] // runtime clients; nil without a store
	clientsAPI *clientsapi.API                // /v1/clients (internal/clientsapi)
	reloadMu   sync.Mutex                     // serializes Reload (reload.go)
	registry   *prometheus.Registry
	view       *opsview.View    // status, history, metrics (internal/opsview)
	bodyBytes  *membudget.Bytes // request bytes in flight (body_bytes.go)
	reloads    *reloadMetrics   // reload.go
	admit      *admit.Layer     // client limits, budgets, fallbacks, cluster (internal/admit)
	handler    http.Handler
	noListen   bool

	life lifecycle.Base // Start and Stop; runs the listener's Serve

	mu   sync.Mutex
	ln   net.Listener
	http *http.Server
	// cancelRequests ends the context of every in-flight request; Stop
	// calls it when the grace period runs out.
	cancelRequests context.CancelCauseFunc
	baseCtx        context.Context
	// active counts the scheduled requests being served.
	active handlerSet

	// The job queue: store is the injected store (WithStore) or nil;
	// ownStore is one Start opened from Config.Store and Stop closes.
	store    jobstore.Store
	jobsLink atomic.Pointer[storelink.Link] // connects a PostgreSQL store in the background (jobs.go)
	jobsMu   sync.Mutex                     // guards ownStore and cleaner: the link starts the queue outside s.mu
	ownStore jobstore.Store
	jobs     atomic.Pointer[jobQueue] // read by handlers without s.mu
	cleaner  *jobstore.JobCleaner
	// responses is the engines' record of which key created each stored
	// Response, kept in the job store while the queue runs
	// (jobs.ResponseKeys); nil without a store.
	responses *jobs.ResponseKeys
	draining  atomic.Bool // set when Stop begins: /readyz answers 503

	clusterGiven admit.ClusterBackend // WithClusterBackend
}

// errShutdown is the cause given to in-flight requests cut off by Stop. It
// wraps dispatch.ErrStopped, which tells the front door's stream body that
// Sluice cut the stream (an error event), not that the client left.
var errShutdown = fmt.Errorf("gateway shutting down: %w", dispatch.ErrStopped)

// cutWait bounds how long Stop waits, once the grace period is over and
// the remaining requests are cancelled, for their handlers to write their
// error events before the connections are closed.
const cutWait = 5 * time.Second

// drainer is implemented by engines that can refuse their queued live
// requests at once when a shutdown begins (*dispatch.Dispatcher.Drain).
type drainer interface {
	Drain() int
}

// handlerSet counts the scheduled requests being served, so Stop can wait
// for the ones it cut to write their answers.
type handlerSet struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

func (h *handlerSet) add() {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
}

func (h *handlerSet) done() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.n == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}

// count returns how many are being served.
func (h *handlerSet) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// wait returns a channel closed once none is being served.
func (h *handlerSet) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	return h.idle
}

// New builds a Server and one dispatcher per upstream from cfg, which is
// defaulted and validated first.
func New(cfg Config, opts ...Option) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("validating config: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.clock = clock.Or(o.clock)
	if o.logger == nil {
		o.logger = slog.Default()
	}
	if o.transport == nil {
		o.transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	baseCtx, cancel := context.WithCancelCause(context.Background())
	s := &Server{
		cfg:            cfg,
		clock:          o.clock,
		log:            o.logger,
		tracer:         o.tracerOrNoop(),
		upstreams:      map[string]*upstream{},
		registry:       prometheus.NewRegistry(),
		baseCtx:        baseCtx,
		cancelRequests: cancel,
		store:          o.store,
		noListen:       o.noListen,
		clusterGiven:   o.clusterBackend,
	}
	// Every later change of the clients (a reload, a poll) reaches the
	// admission layer (new limits and budgets; the spend already made is
	// kept) and the metrics' client label.
	s.clients = clients.NewRegistry(cfg.Clients, s.clock.Now, func(admitted []admit.Client, names []string) {
		s.admit.SetClients(admitted)
		s.view.SetClients(names)
	})
	clientNames := make([]string, 0, len(cfg.Clients))
	for _, c := range cfg.Clients {
		clientNames = append(clientNames, c.Name)
	}
	s.view = opsview.New(opsview.Config{Upstreams: cfg.Upstreams, Clients: clientNames, AnonymousClient: clients.Anonymous,
		Registry: s.registry, Jobs: cfg.Store != StoreNone || s.store != nil, Clock: s.clock, Logger: s.log})
	s.bodyBytes = membudget.NewBytes(cfg.MaxRequestBytesInFlight, cfg.RequestBytesWait, s.clock, s.registry)
	s.reloads = newReloadMetrics(s.registry)
	layer, err := admit.New(admit.Config{Clients: clients.Admitted(cfg.Clients), Prices: cfg.Prices, Upstreams: cfg.Upstreams,
		SharedSpend: isPostgres(cfg.Store) || o.sharedStore, Clock: s.clock, Logger: s.log, Observer: s.view.AdmitObserver()})
	if err != nil {
		return nil, fmt.Errorf("validating config: %w", err)
	}
	s.admit = layer
	var responses dispatch.ResponseStore // nil: the engines' memory alone
	if cfg.Store != StoreNone || s.store != nil {
		s.responses = jobs.NewResponseKeys(s.log, s.clock)
		responses = s.responses
	}
	for _, uc := range cfg.Upstreams {
		target, err := url.Parse(uc.BaseURL)
		if err != nil { // validated above; kept for safety
			return nil, fmt.Errorf("parsing upstreams %s base_url: %w", uc.Name, redactURLError(err))
		}
		u := &upstream{cfg: uc, target: target}
		if e, ok := o.engines[uc.Name]; ok {
			u.engine = e
		} else {
			e, err := newEngine(uc, o, s.view.Observer(uc.Name), responses)
			if err != nil {
				return nil, fmt.Errorf("building dispatcher for upstream %s: %w", uc.Name, err)
			}
			u.engine = e
		}
		u.proxy = s.newPassthrough(u, o.transport)
		if uc.Batch.Enabled() {
			if u.batchAPI, err = jobs.NewBatchAPI(jobs.BatchAPIConfig{Upstream: uc, Transport: o.transport, Clock: s.clock}); err != nil {
				return nil, fmt.Errorf("building the Batch API client of upstream %s: %w", uc.Name, err)
			}
		}
		s.upstreams[uc.Name] = u
		s.order = append(s.order, uc.Name)
	}
	engines := map[string]admit.Engine{}
	read := map[string]opsview.Engine{}
	for name, u := range s.upstreams {
		engines[name] = admitEngine{u.engine}
		if e, ok := u.engine.(opsview.Engine); ok {
			read[name] = e
		}
	}
	layer.Bind(engines)
	s.view.Bind(opsview.Sources{Engines: read, Admission: layer, Cluster: layer})
	s.clientsAPI, err = clientsapi.New(clientsapi.Config{Registry: s.clients, Upstreams: s.order, Clock: s.clock, Logger: s.log,
		Registerer: s.registry, Authenticate: func(r *http.Request) (clients.Client, bool) { return s.authenticate(r.Header) },
		Running: s.runningClients})
	if err != nil {
		return nil, err
	}
	s.handler = s.limitHeaders(s.cfg.MaxHeaderBytes, s.routes())
	return s, nil
}

// admitEngine is an upstream's engine as the admission layer sends to it:
// one that cannot tell its availability (a test's fake) is always
// available.
type admitEngine struct{ engine }

func (e admitEngine) Unavailable() bool {
	a, ok := e.engine.(interface{ Unavailable() bool })
	return ok && a.Unavailable()
}

// PredictWait is the engine's, when it predicts (the router's deadline
// rule); 0 otherwise.
func (e admitEngine) PredictWait(cost provider.Cost, class llm.Priority, client string) (time.Duration, bool) {
	if p, ok := e.engine.(interface {
		PredictWait(provider.Cost, llm.Priority, string) (time.Duration, bool)
	}); ok {
		return p.PredictWait(cost, class, client)
	}
	return 0, false
}

// Config returns the defaulted configuration the server started with
// (Reload may have changed its clients and upstream keys since).
func (s *Server) Config() Config { return s.cfg }

// Handler returns the gateway's routes, for tests or to mount in another
// server. Requests it serves are not cut off by Stop's grace period unless
// they came through Start's listener.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /livez", s.serveLivez)
	mux.HandleFunc("GET /readyz", s.serveReadyz)
	mux.HandleFunc("GET /metrics", s.serveMetrics(promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry})))
	mux.HandleFunc("GET /v1/status", s.serveStatus)
	mux.HandleFunc("GET /v1/status/history", s.serveHistory)
	mux.HandleFunc("POST /v1/upstreams/{name}/breaker", s.requireAdmin(s.serveBreaker))
	s.clientsAPI.Register(mux)
	mux.HandleFunc("GET /ui", s.serveUI)
	mux.Handle("GET /ui/", s.uiAssets())
	for _, p := range jobRoutes {
		mux.HandleFunc(p, s.serveJobs)
	}
	mux.HandleFunc("POST /v1/upstreams/{name}/{action}", s.requireAdmin(s.serveJobs))
	// Only configured upstreams get a subtree: any other path is a 404
	// (a wildcard subtree would redirect /foo to /foo/ first).
	for _, name := range s.order {
		mux.HandleFunc("/"+name+"/", func(w http.ResponseWriter, r *http.Request) {
			r.SetPathValue("upstream", name)
			s.serveUpstream(w, r)
		})
	}
	mux.HandleFunc("/", s.serveNotFound)
	return mux
}

// Start starts the dispatchers and the job queue, then listens on
// Config.Listen and serves in the background until Stop (unless
// WithoutListener). A second Start answers lifecycle.ErrStarted, a Start
// after Stop lifecycle.ErrStopped; a Start that fails stops what it had
// started.
func (s *Server) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(context.Context) error { return s.start(ctx) })
}

// start is Start's order: ctx (Start's) bounds the opening of stores and
// the cluster's first sync; every component runs until Stop.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Dispatchers first, so the first request finds them running.
	var started []stopStep
	for _, name := range s.order {
		lc, ok := s.upstreams[name].engine.(lifecycle.Service)
		if !ok {
			continue
		}
		if err := lc.Start(ctx); err != nil {
			s.undoStart(ctx, started)
			return fmt.Errorf("starting dispatcher for upstream %s: %w", name, err)
		}
		started = append(started, lc.Stop)
	}
	// The cluster's shares, before any work arrives (cluster.go).
	if err := s.startCluster(ctx); err != nil {
		s.undoStart(ctx, started)
		return err
	}
	started = append(started, s.stopCluster)
	// The history sampler reads the engines only.
	if err := s.view.Sampler().Start(ctx); err != nil {
		s.undoStart(ctx, started)
		return err
	}
	started = append(started, s.view.Sampler().Stop)
	// Then the job queue, which hands work to the dispatchers.
	if err := s.startJobs(ctx); err != nil {
		s.undoStart(ctx, started)
		return err
	}
	if s.noListen {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		s.undoStart(ctx, append([]stopStep{s.stopJobs}, started...))
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	ln = newLimitListener(ln, s.cfg.MaxConnections) // limit_listener.go
	s.ln = ln
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    headerCeiling(s.cfg.MaxHeaderBytes), // limitHeaders holds max_header_bytes, in JSON
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv := s.http
	s.life.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serving HTTP", "err", err)
		}
	})
	return nil
}

// Addr returns the address the server listens on (useful with port 0), or
// "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop shuts the gateway down gracefully. It is idempotent and safe before
// Start. The order matters:
//
//  1. stop accepting connections and, at once, answer every request still
//     queued in the engines with a 503 and retry-after (Dispatcher.Drain;
//     nothing was sent for them): they do not wait out the grace period;
//  2. let the requests already sent, streams included, finish for up to
//     Config.ShutdownGrace (or until ctx ends, if sooner);
//  3. then cancel the requests still running (cause errShutdown): each
//     stream ends with the protocol's error event, a request still
//     between attempts gets the 503; wait for those answers (up to
//     cutWait), then close the connections;
//  4. then stop the job service (running jobs finish or hand their leases
//     back), the retention cleaner, and close the store;
//  5. then stop the dispatchers, once nothing can hand them work.
func (s *Server) Stop(ctx context.Context) error {
	err := s.life.Stop(ctx, s.stop)
	s.cancelRequests(errShutdown) // also when never started
	if err != nil {
		return fmt.Errorf("stopping server: %w", err)
	}
	return nil
}

// stop is Stop's order, steps 1 to 5.
func (s *Server) stop(ctx context.Context) error {
	s.draining.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.http == nil { // WithoutListener: no connections to drain
		if n := s.drainEngines(); n > 0 {
			s.log.Info("shutting down: answered the queued requests with 503", "requests", n)
		}
		s.cancelRequests(errShutdown)
	} else {
		// The grace period runs on the server's clock (the requests' own
		// clock), so it is the same time the engines measure.
		graceCtx, cancel := context.WithCancelCause(ctx)
		graceTimer := s.clock.NewTimer(s.cfg.ShutdownGrace)
		go func() {
			select {
			case <-graceTimer.C():
				cancel(context.DeadlineExceeded)
			case <-graceCtx.Done():
			}
		}()
		shutdown := make(chan error, 1)
		go func() { shutdown <- s.http.Shutdown(graceCtx) }()
		if n := s.drainEngines(); n > 0 {
			s.log.Info("shutting down: answered the queued requests with 503", "requests", n)
		}
		err := <-shutdown
		graceTimer.Stop()
		cancel(nil)
		if err != nil {
			// The grace period ran out: cut off what is left, let each handler
			// write its stream's error event, then close the connections.
			s.log.Warn("shutdown grace period over; cutting the requests still running",
				"requests", s.active.count(), "grace", s.cfg.ShutdownGrace, "err", err)
			s.cancelRequests(errShutdown)
			t := s.clock.NewTimer(cutWait)
			select {
			case <-s.active.wait():
			case <-t.C():
				s.log.Warn("requests cut at shutdown did not finish their answers in time", "requests", s.active.count())
			case <-ctx.Done():
			}
			t.Stop()
			// A handler that returned may still be finishing its answer
			// (net/http writes the chunked body's end after it): let the
			// connections go idle before closing what is left.
			errs = append(errs, s.closeWhenIdle(ctx))
		}
		s.cancelRequests(errShutdown)
		// Serve returns once Shutdown or Close has: wait for it.
		_ = s.life.Halt(context.WithoutCancel(ctx))
	}
	steps := []stopStep{s.stopJobs}
	for _, name := range s.order {
		if lc, ok := s.upstreams[name].engine.(lifecycle.Service); ok {
			steps = append(steps, lc.Stop)
		}
	}
	steps = append(steps, s.stopCluster, s.view.Sampler().Stop)
	errs = append(errs, stopAll(ctx, steps))
	return errors.Join(errs...)
}

// closeWhenIdle waits up to cutWait for the connections to finish the
// answers their handlers wrote (Shutdown again: it closes each connection
// once idle), then closes whatever is left.
func (s *Server) closeWhenIdle(ctx context.Context) error {
	idleCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := s.clock.NewTimer(cutWait)
	defer t.Stop()
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-idleCtx.Done():
		}
	}()
	if err := s.http.Shutdown(idleCtx); err == nil {
		return nil
	}
	return s.http.Close()
}

// drainEngines makes every engine refuse its queued live requests at once
// and returns how many it refused.
func (s *Server) drainEngines() int {
	n := 0
	for _, name := range s.order {
		if d, ok := s.upstreams[name].engine.(drainer); ok {
			n += d.Drain()
		}
	}
	return n
}

// stopStep is one component's Stop in a shutdown order.
type stopStep func(ctx context.Context) error

// undoStart stops what a failed Start had started. Start returns the error
// that made it fail; a failure to stop on the way out is logged so that it
// is not lost.
func (s *Server) undoStart(ctx context.Context, steps []stopStep) {
	if err := stopAll(ctx, steps); err != nil {
		s.log.Warn("stopping components after a failed start", "err", err)
	}
}

// stopAll runs steps in order and joins their errors.
func stopAll(ctx context.Context, steps []stopStep) error {
	var errs []error
	for _, stop := range steps {
		if err := stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UpstreamNames returns the upstream names in config order.
func (s *Server) UpstreamNames() []string { return append([]string(nil), s.order...) }
