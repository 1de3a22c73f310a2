package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/webhook"
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
	cl, ok := s.clientSet().authenticate(r.Header)
	if !ok {
		writeJobsError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing Sluice client key")
		return
	}
	q := s.jobs.Load()
	if q == nil {
		msg := "the job queue is not running"
		if s.cfg.Store == StoreNone {
			msg = "the job queue is disabled (store: none)"
		}
		writeJobsError(w, http.StatusServiceUnavailable, "unavailable_error", msg)
		return
	}
	r.Header.Set(headerClient, cl.name)
	if strings.HasSuffix(r.URL.Path, "/results") {
		// A large batch's results may take longer than WriteTimeout.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	}
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/jobs" || r.URL.Path == "/v1/batches") {
		// Submissions hold their body until it is stored: reserve it first,
		// give it back once the handler (and so the store write) is done.
		res, err := s.bodyBytes.reserve(r)
		if err != nil {
			if errors.Is(err, errBodyBytesFull) {
				jobsapi.WriteAPIError(w, bodyBytesProblem(s.bodyBytes.limit), nil)
			}
			return
		}
		defer res.release()
		r.Body = res.body(r)
	}
	q.api.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), jobClientKey{}, cl)))
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

// startJobs opens the store (unless one was given), then starts the job
// service and the retention cleaner. s.mu must be held.
func (s *Server) startJobs(ctx context.Context) error {
	if s.cfg.Store == StoreNone && s.store == nil {
		return nil
	}
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
	for _, name := range s.order {
		d, ok := s.upstreams[name].engine.(jobs.Dispatcher)
		if !ok {
			return fmt.Errorf("upstream %q: its engine cannot run jobs (no admission tickets)", name)
		}
		dispatchers[name] = d
		protocols[name] = s.upstreams[name].cfg.Protocol
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
		Store: st, Dispatchers: dispatchers, Protocols: protocols, Admission: s.admit, Clock: s.clock, Logger: s.log, Observer: s.view.JobsObserver(), Tracer: s.tracer,
		Owner: s.admit.ClusterNodeID()}) // the cluster's node id, when sharing
	if err != nil {
		return errors.Join(fmt.Errorf("building the job service: %w", err), s.closeStore())
	}
	api, err := jobsapi.New(jobsapi.Config{Store: st, Runtime: svc, Protocols: protocols, Clock: s.clock, Logger: s.log, Observer: s.view.JobsAPIObserver(),
		MaxAttempts: jc.WithDefaults().MaxAttempts, WebhookCheck: guard.CheckURL,
		ClientOf: func(r *http.Request) string { return r.Header.Get(headerClient) },
		AdminOf: func(r *http.Request) bool {
			cl, ok := callerOf(r)
			return ok && cl.admin
		},
		PriorityOf: func(r *http.Request, p llm.Priority) llm.Priority {
			if cl, ok := callerOf(r); ok {
				return cl.caller().Cap(p) // capped at the client's max_priority, as on the proxy routes
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
	poller := &clientsPoller{st: st, interval: s.cfg.ClientsPoll, clock: s.clock, log: s.log,
		apply: func(rc []runtimeClient) { s.applyClients(nil, rc) }}
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
	return nil
}

// stopJobs stops the job service (in-flight jobs finish or hand their
// leases back), the cleaner, and closes a store the server opened.
// s.mu must be held.
func (s *Server) stopJobs(ctx context.Context) error {
	var errs []error
	s.view.SetJobStore(nil) // scrapes and status stop reading before the store closes
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
