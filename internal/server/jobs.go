package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clientsapi"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/storelink"
	"github.com/sluicehq/sluice/internal/webhook"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// The durable job queue runs inside the gateway: jobs are dispatched by the
// same per-upstream engines as live traffic, so priorities and quotas apply
// across both.

// WithStore makes the server use st for the job queue instead of opening
// Config.Store. The server does not close it.
func WithStore(st jobstore.Store) Option { return func(o *options) { o.store = st } }

// WithSharedStore is WithStore for a store other gateways use too (like a
// PostgreSQL store named by Config.Store): each flush of the spend reads
// back what all of them spent, and on a cluster the budgets are shared.
func WithSharedStore(st jobstore.Store) Option {
	return func(o *options) { o.store, o.sharedStore = st, true }
}

// JobStoreRetryAfter is the retry-after of the jobs API's 503 while the
// job store is not connected yet.
const JobStoreRetryAfter = 5 * time.Second

// jobStoreAttemptTimeout bounds one attempt to open the job store and
// start the queue on it: long enough for its migrations.
const jobStoreAttemptTimeout = 30 * time.Second

// headerClient carries the authenticated client's name to the job service;
// whatever the caller sent in it is overwritten.
const headerClient = frontdoor.HeaderClient

// jobClientKey carries the authenticated client to the job service's hooks.
type jobClientKey struct{}

// jobRoutes are the paths the job API answers. Pausing and resuming an
// upstream is also behind requireAdmin (routes); the job API checks
// ownership of every job and batch itself (jobsapi.Config.AdminOf).
var jobRoutes = []string{"/v1/jobs", "/v1/jobs/", "/v1/batches", "/v1/batches/", "/v1/upstreams/"}

// serveJobs authenticates the client and hands the request to the job
// API. The client's name (never its key) is passed on for fairness and
// listing.
func (s *Server) serveJobs(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.authenticate(r.Header)
	if !ok {
		writeJobsError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing Sluice client key")
		return
	}
	q := s.jobs.Load()
	if q == nil {
		pr := frontdoor.Problem{Status: http.StatusServiceUnavailable, Type: "unavailable_error", Message: "the job queue is not running"}
		switch {
		case s.cfg.Store == StoreNone:
			pr.Message = "the job queue is disabled (store: none)"
		case s.jobsLink.Load() != nil:
			pr.Message, pr.RetryAfter = "the job store is not connected yet: the gateway is connecting to it in the background and starts the job queue once it answers; retry later", JobStoreRetryAfter
		}
		jobsapi.WriteAPIError(w, pr, nil)
		return
	}
	r.Header.Set(headerClient, cl.Name)
	if strings.HasSuffix(r.URL.Path, "/results") {
		// A large batch's results may take longer than WriteTimeout.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/jobs" || r.URL.Path == "/v1/batches") {
		// Submissions hold their body until it is stored: reserve it first,
		// give it back once the handler (and so the store write) is done.
		res, err := reserveBody(s.bodyBytes, r)
		if err != nil {
			if errors.Is(err, errBodyBytesFull) {
				jobsapi.WriteAPIError(w, bodyBytesProblem(s.bodyBytes.Limit()), nil)
			}
			return
		}
		defer res.release()
		r.Body = res.body(r)
	}
	q.api.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), jobClientKey{}, cl)))
}

// serveProviderBatch hands a route of the provider's batch or files API
// under upstream name (rest: the path after its prefix) to the job API,
// as the authenticated client cl.
func (s *Server) serveProviderBatch(w http.ResponseWriter, r *http.Request, q *jobQueue, cl clients.Client, name, rest string) {
	r.Header.Set(headerClient, cl.Name)
	if r.Method == http.MethodPost {
		// A create holds its body until it is stored (as on /v1/batches).
		res, err := reserveBody(s.bodyBytes, r)
		if err != nil {
			if errors.Is(err, errBodyBytesFull) {
				frontdoor.WriteProblem(w, s.upstreams[name].cfg.Protocol, frontdoor.NewRequestID(), bodyBytesProblem(s.bodyBytes.Limit()))
			}
			return
		}
		defer res.release()
		r.Body = res.body(r)
	}
	q.api.ServeProvider(w, r.WithContext(context.WithValue(r.Context(), jobClientKey{}, cl)), name, rest)
}

// batchClasses are the upstreams' batch_priority, the class of the jobs of
// a batch made through a provider's own batch API.
func batchClasses(ups []upcfg.Config) map[string]llm.Priority {
	out := make(map[string]llm.Priority, len(ups))
	for _, u := range ups {
		out[u.Name] = u.BatchClass()
	}
	return out
}

func writeJobsError(w http.ResponseWriter, status int, typ, msg string) {
	jobsapi.WriteAPIError(w, frontdoor.Problem{Status: status, Type: typ, Message: msg}, nil)
}

// jobQueue is the running job queue: the runtime (its workers, rescuer and
// webhook sender, and the store it runs on) and the job API over it,
// published and withdrawn together.
type jobQueue struct {
	*jobs.Service
	api *jobsapi.API
}

// startJobs starts the job runtime: at once on a store given
// (WithStore) or an SQLite file (a local file: an error opening it is the
// operator's to fix, reported at start); on a PostgreSQL store, in the
// background once it connects (storelink), so that the gateway listens
// and serves live traffic whatever the database's state. Until then the
// jobs API answers 503 (serveJobs). s.mu must be held.
func (s *Server) startJobs(ctx context.Context) error {
	if s.cfg.Store == StoreNone && s.store == nil {
		return nil
	}
	observe := s.view.StoreObserver()
	if s.store != nil || !isPostgres(s.cfg.Store) {
		if err := s.runJobs(ctx); err != nil {
			return err
		}
		observe("jobs", true)
		return nil
	}
	link, err := storelink.New(storelink.Config{Name: "jobs", Open: s.runJobs, Ping: s.pingJobs, AttemptTimeout: jobStoreAttemptTimeout,
		Clock: s.clock, Logger: s.log, Observer: observe})
	if err != nil {
		return fmt.Errorf("connecting the job store: %w", err)
	}
	s.jobsLink.Store(link)
	s.admit.AwaitSpendStore() // budgets wait for the spend kept there
	if err := link.Start(ctx); err != nil {
		return fmt.Errorf("connecting the job store: %w", err)
	}
	// A healthy store answers at once: the jobs API is then up when the
	// listener opens.
	link.Await(ctx, storelink.StartWait)
	return nil
}

// pingJobs is the job store link's check: one bounded read.
func (s *Server) pingJobs(ctx context.Context) error {
	q := s.jobs.Load()
	if q == nil {
		return errors.New("the job queue is not running")
	}
	_, err := q.Store().PausedUpstreams(ctx)
	return err
}

// runJobs opens the store (unless one was given), then starts the job
// service and the retention cleaner; on failure it leaves nothing open
// (the link tries again).
func (s *Server) runJobs(ctx context.Context) error {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	st := s.store
	if st == nil {
		opened, err := jobstore.Open(ctx, s.cfg.Store, jobstore.Options{Clock: s.clock})
		if err != nil {
			return fmt.Errorf("opening the job store: %w", err)
		}
		st, s.ownStore = opened, opened
	}
	dispatchers := map[string]jobs.Dispatcher{}
	protocols := map[string]llm.Protocol{}
	flex := map[string]time.Duration{}
	routes := map[string]upcfg.BatchRoute{}
	batchAPIs := map[string]jobs.BatchAPI{}
	for _, name := range s.order {
		routes[name], batchAPIs[name] = s.upstreams[name].cfg.Batch, s.upstreams[name].batchAPI // nil unless it routes
		d, ok := s.upstreams[name].engine.(jobs.Dispatcher)
		if !ok {
			return fmt.Errorf("upstream %q: its engine cannot run jobs (no admission tickets)", name)
		}
		dispatchers[name] = d
		protocols[name] = s.upstreams[name].cfg.Protocol
		if f := s.upstreams[name].cfg.WithDefaults().Flex; f.Enabled {
			flex[name] = f.MinSlack
		}
	}
	jc := s.cfg.Jobs
	if s.ownStore != nil || jc.SpoolDir == StoreNone {
		jc.SpoolDir = spoolDir(jc.SpoolDir, s.cfg.Store) // a store given by the embedder has no path of ours
	}
	guard, err := webhook.NewGuard(jc.Webhooks.Allow) // validated with the config
	if err != nil {
		return errors.Join(fmt.Errorf("jobs.webhooks.%w", err), s.closeStore())
	}
	svc, err := jobs.New(jobs.Config{Settings: jc, WebhookClient: &http.Client{Transport: guard.Transport()},
		Store: st, Dispatchers: dispatchers, Protocols: protocols, FlexMinSlack: flex, BatchRoutes: routes, BatchAPIs: batchAPIs, Admission: s.admit, Clock: s.clock, Logger: s.log, Observer: s.view.JobsObserver(), Tracer: s.tracer,
		Owner: s.admit.ClusterNodeID()}) // the cluster's node id, when sharing
	if err != nil {
		return errors.Join(fmt.Errorf("building the job service: %w", err), s.closeStore())
	}
	api, err := jobsapi.New(jobsapi.Config{Store: st, Runtime: svc, Protocols: protocols, Clock: s.clock, Logger: s.log, Observer: s.view.JobsAPIObserver(),
		MaxAttempts: jc.WithDefaults().MaxAttempts, WebhookCheck: guard.CheckURL,
		BatchRetention: jc.WithDefaults().Retention.ProviderBatches, BatchPriority: batchClasses(s.cfg.Upstreams),
		ClientOf: func(r *http.Request) string { return r.Header.Get(headerClient) },
		Permit:   s.admit.Permit, // the client's allowed upstreams and models, at submit
		AdminOf: func(r *http.Request) bool {
			cl, ok := callerOf(r)
			return ok && cl.Admin
		},
		PriorityOf: func(r *http.Request, p llm.Priority) llm.Priority {
			if cl, ok := callerOf(r); ok {
				return cl.Caller().Cap(p) // capped at the client's max_priority, as on the proxy routes
			}
			return p
		},
	})
	if err != nil {
		return errors.Join(fmt.Errorf("building the job API: %w", err), s.closeStore())
	}
	cleaner, err := jobstore.NewJobCleaner(st, jobstore.JobCleanerConfig{Clock: s.clock,
		SucceededRetention: jc.Retention.Succeeded, DeadRetention: jc.Retention.Dead, CanceledRetention: jc.Retention.Canceled,
		Leading: s.admit.ClusterLeading()}) // on a cluster, the leader only
	if err != nil {
		return errors.Join(fmt.Errorf("building the job cleaner: %w", err), s.closeStore())
	}
	// The spend kept in the store, before any request is charged.
	if err := s.admit.Start(ctx, st); err != nil {
		return errors.Join(err, s.closeStore())
	}
	// The runtime clients, before the first request is authenticated.
	poller := clients.NewPoller(clients.PollerConfig{Store: st, Interval: s.cfg.ClientsPoll, Apply: s.clients.SetRuntime,
		Clock: s.clock, Logger: s.log})
	if err := poller.Start(ctx); err != nil {
		return errors.Join(fmt.Errorf("starting the runtime clients: %w", err), s.admit.Stop(ctx), s.closeStore())
	}
	if err := svc.Start(ctx); err != nil {
		return errors.Join(fmt.Errorf("starting the job service: %w", err), poller.Stop(ctx), s.admit.Stop(ctx), s.closeStore())
	}
	if err := cleaner.Start(ctx); err != nil {
		return errors.Join(fmt.Errorf("starting the job cleaner: %w", err), svc.Stop(ctx), poller.Stop(ctx), s.admit.Stop(ctx), s.closeStore())
	}
	s.poller.Store(poller)
	s.jobs.Store(&jobQueue{Service: svc, api: api})
	s.cleaner = cleaner
	s.view.SetJobStore(st)
	s.responses.Set(st) // the engines record and find stored Responses' keys there
	return nil
}

// stopJobs stops the job service (in-flight jobs finish or hand their
// leases back), the cleaner, and closes a store the server opened.
// s.mu must be held.
func (s *Server) stopJobs(ctx context.Context) error {
	var errs []error
	if l := s.jobsLink.Load(); l != nil {
		// No attempt to connect outlives the stop (one under way is
		// canceled), so nothing starts behind it.
		errs = append(errs, l.Stop(ctx))
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	s.view.SetJobStore(nil) // scrapes and status stop reading before the store closes
	if s.responses != nil {
		s.responses.Set(nil) // the engines keep to their memory
	}
	if q := s.jobs.Swap(nil); q != nil {
		errs = append(errs, q.Stop(ctx))
	}
	if s.cleaner != nil {
		errs = append(errs, s.cleaner.Stop(ctx))
		s.cleaner = nil
	}
	if p := s.poller.Swap(nil); p != nil {
		errs = append(errs, p.Stop(ctx))
	}
	// The spend settled since the last flush, once no job can add to it
	// (live requests were drained before), then the store.
	errs = append(errs, s.admit.Stop(ctx))
	errs = append(errs, s.closeStore())
	return errors.Join(errs...)
}

// runningClients returns the store the runtime clients are kept in and
// their poller while the job queue runs (the clients API), else nil, nil.
func (s *Server) runningClients() (clientsapi.Store, *clients.Poller) {
	q, p := s.jobs.Load(), s.poller.Load()
	if q == nil || p == nil {
		return nil, nil
	}
	return q.Store(), p
}

func (s *Server) closeStore() error {
	if s.ownStore == nil {
		return nil
	}
	err := s.ownStore.Close()
	s.ownStore = nil
	if err != nil {
		return fmt.Errorf("closing the job store: %w", err)
	}
	return nil
}

// SpoolDirDefault is the result spool's directory with a PostgreSQL store.
const SpoolDirDefault = "./sluice-spool"

// spoolDir is the result spool's directory of jobs.spool_dir (dir) for
// store, "" for none.
func spoolDir(dir, store string) string {
	switch {
	case dir == StoreNone:
		return ""
	case dir != "":
		return dir
	case strings.HasPrefix(store, "sqlite:"):
		return strings.TrimPrefix(strings.TrimPrefix(store, "sqlite:"), "//") + ".spool"
	}
	return SpoolDirDefault
}
