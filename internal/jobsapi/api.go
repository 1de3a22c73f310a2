package jobsapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Runtime is what the API asks of the job runtime that runs the jobs it
// queues: the operations that must reach the jobs running in this process
// or the runtime's webhook sender, not only the store. *jobs.Service
// implements it.
type Runtime interface {
	// Cancel cancels job id in the store and aborts its upstream call when
	// it runs in this process. jobstore.ErrNotFound and ErrConflict (the
	// job already finished) come back wrapped.
	Cancel(ctx context.Context, id int64) (*jobstore.Job, error)
	// CancelBatch cancels the live jobs of batch id, aborting those running
	// in this process. jobstore.ErrNotFound comes back wrapped.
	CancelBatch(ctx context.Context, id string) (jobstore.CancelBatchResult, error)
	// CancelRun cancels the live jobs of run id (of client only, unless
	// client is ""), aborting those running in this process.
	// jobstore.ErrNotFound (the run has no job of client) comes back
	// wrapped.
	CancelRun(ctx context.Context, id, client string) (jobstore.CancelRunResult, error)
	// Redeliver makes job id's latest webhook delivery pending and due at
	// once, with the same id, and wakes the webhook sender.
	// jobstore.ErrNotFound (no job, or no delivery) comes back wrapped.
	Redeliver(ctx context.Context, id int64) (*jobstore.WebhookDelivery, error)
	// Finished returns a channel closed the next time a job finishes in
	// this process (long polls wait on it).
	Finished() <-chan struct{}
}

// Observer receives the API's events, for metrics (the server's Prometheus
// adapter implements it, beside jobs.Observer). Its method must be O(1) and
// never block.
type Observer interface {
	// Submitted: n new jobs of upstream were queued (one per POST /v1/jobs,
	// or a whole batch). A submit answered with an existing job by its
	// idempotency key is not counted.
	Submitted(upstream string, n int)
}

type nopObserver struct{}

func (nopObserver) Submitted(string, int) {}

// API serves the job queue's HTTP routes: /v1/jobs, /v1/batches and
// /v1/upstreams/{name}/pause|resume, /v1/upstreams/paused. It reads and
// writes the store itself and reaches the runtime only through Runtime,
// so it works before the runtime starts (jobs are queued and run once the
// workers start). Safe for concurrent use.
type API struct {
	cfg       Config
	store     jobstore.Store
	rt        Runtime
	upstreams []string // sorted
	mux       *http.ServeMux
	// The providers' batch and files routes, by protocol (provider.go).
	anthropicMux, openaiMux *http.ServeMux
}

var _ http.Handler = (*API)(nil)

// New returns the API for cfg (after WithDefaults), or an error naming the
// invalid field.
func New(cfg Config) (*API, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuring the job API: %w", err)
	}
	a := &API{cfg: cfg, store: cfg.Store, rt: cfg.Runtime}
	for name := range cfg.Protocols {
		a.upstreams = append(a.upstreams, name)
	}
	slices.Sort(a.upstreams)
	a.mux = a.routes()
	a.anthropicMux, a.openaiMux = a.anthropicRoutes(), a.openaiRoutes()
	return a, nil
}

// ServeHTTP answers one request on the job routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

func (a *API) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", a.serveSubmit)
	mux.HandleFunc("GET /v1/jobs", a.serveList)
	mux.HandleFunc("GET /v1/jobs/{id}", a.serveGet)
	mux.HandleFunc("DELETE /v1/jobs/{id}", a.serveCancel)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", a.serveCancel)
	mux.HandleFunc("POST /v1/jobs/{id}/retry", a.serveRetry)
	mux.HandleFunc("POST /v1/jobs/{id}/webhook/redeliver", a.serveRedeliver)
	mux.HandleFunc("POST /v1/jobs/retry", a.serveRetryBulk)
	mux.HandleFunc("POST /v1/jobs/cancel", a.serveCancelRun)
	mux.HandleFunc("POST /v1/upstreams/{name}/{action}", a.servePause)
	mux.HandleFunc("GET /v1/upstreams/paused", a.servePaused)
	mux.HandleFunc("POST /v1/batches", a.serveBatchCreate)
	mux.HandleFunc("GET /v1/batches", a.serveBatchList)
	mux.HandleFunc("GET /v1/batches/{id}", a.serveBatchGet)
	mux.HandleFunc("GET /v1/batches/{id}/results", a.serveBatchResults)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", a.serveBatchCancel)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
	return mux
}
