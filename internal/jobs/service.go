package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/webhook"
)

// Causes given to the contexts of running jobs.
var (
	errJobCanceled = errors.New("job canceled")
	errLeaseLost   = errors.New("job lease lost")
	errShutdown    = errors.New("job service stopping")
)

// handBackTimeout bounds the store write that returns an aborted job's
// lease on Stop.
const handBackTimeout = 5 * time.Second

// Service runs jobs from a store: the workers, the lease rescuer and the
// webhook sender. Create it with New, serve the job API over it
// (jobsapi.New with the Service as its Runtime), then Start it; Stop it
// before stopping the dispatchers.
type Service struct {
	cfg       Config
	store     jobstore.Store
	rescuer   *jobstore.JobRescuer
	upstreams []string
	backoff   flow.Backoff
	hooks     *webhookSender
	signer    *standardwebhooks.Webhook // nil: webhooks unsigned
	spool     *spool                    // nil without Config.SpoolDir

	replayMu sync.Mutex  // one write-back of the spool at a time
	answers  heldAnswers // answers held in memory past their lease
	// storeAway says the last result write failed as ErrUnavailable: an
	// answer received meanwhile is spooled before its first write.
	storeAway atomic.Bool

	rmu sync.Mutex
	rnd *rand.Rand

	life lifecycle.Base // Start and Stop

	mu         sync.Mutex
	stopClaims context.CancelCauseFunc
	// stopping is done once Stop begins: a worker holding an answer the
	// store cannot take then spools it (or gives it up) instead of
	// retrying, so Stop never waits on a store that stays away.
	stopping    context.Context
	abortJobs   context.CancelCauseFunc
	loops       sync.WaitGroup // worker loops and batch routers
	routers     []*batchRouter
	jobs        sync.WaitGroup // running jobs
	runningJobs map[int64]context.CancelCauseFunc
	finished    chan struct{} // closed and replaced when a job finishes here (Finished)
}

// New returns a Service for cfg (after WithDefaults), or an error naming
// the invalid field.
func New(cfg Config) (*Service, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuring job service: %w", err)
	}
	s := &Service{
		cfg:         cfg,
		store:       cfg.Store,
		backoff:     flow.Backoff{Base: cfg.Retry.BaseDelay, Max: cfg.Retry.MaxDelay}.WithDefaults(),
		rnd:         rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		runningJobs: map[int64]context.CancelCauseFunc{},
		stopping:    context.Background(), // until Start
		finished:    make(chan struct{}),
	}
	for name := range cfg.Dispatchers {
		s.upstreams = append(s.upstreams, name)
	}
	slices.Sort(s.upstreams)
	if cfg.RescueInterval > 0 {
		r, err := jobstore.NewJobRescuer(cfg.Store, jobstore.JobRescuerConfig{
			Interval:  cfg.RescueInterval,
			MaxStalls: cfg.MaxStalls,
			Clock:     cfg.Clock,
			OnPass: func(res jobstore.RescueResult, err error) {
				cfg.Observer.Rescued(res) // what the pass did before any error
				if err != nil {
					cfg.Logger.Warn("rescuing expired job leases", "err", err)
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("configuring job service: %w", err)
		}
		s.rescuer = r
	}
	if cfg.WebhookSecret != "" {
		s.signer, _ = webhook.NewSigner(cfg.WebhookSecret) // validated above
	}
	s.hooks = newWebhookSender(s)
	for _, name := range s.upstreams {
		if r := cfg.BatchRoutes[name]; r.Enabled() {
			s.routers = append(s.routers, newBatchRouter(s, name, r, cfg.BatchAPIs[name]))
		}
	}
	if cfg.SpoolDir != "" {
		sp, err := openSpool(cfg.SpoolDir, cfg.SpoolMaxBytes, cfg.SpoolMaxEntries)
		if err != nil {
			return nil, fmt.Errorf("configuring job service: SpoolDir: %w", err)
		}
		s.spool = sp
		// Said once, with the absolute path: a relative default lands in
		// the working directory, where nobody would look for it.
		dir, err := filepath.Abs(cfg.SpoolDir)
		if err != nil {
			dir = cfg.SpoolDir
		}
		cfg.Logger.Info("job result spool", "dir", dir, "entries", sp.len())
	}
	return s, nil
}

// Store returns the store the service runs on.
func (s *Service) Store() jobstore.Store { return s.store }

// Start starts one worker loop per upstream, the lease rescuer and the
// webhook sender (lifecycle.Base: a second Start answers
// lifecycle.ErrStarted, a Start after Stop lifecycle.ErrStopped). The
// workers run until Stop, whatever becomes of ctx.
func (s *Service) Start(ctx context.Context) error {
	if err := s.life.Start(ctx, s.start); err != nil {
		return fmt.Errorf("starting job service: %w", err)
	}
	return nil
}

func (s *Service) start(run context.Context) error {
	claimCtx, stopClaims := context.WithCancelCause(run)
	jobCtx, abortJobs := context.WithCancelCause(run)
	s.mu.Lock()
	s.stopClaims, s.abortJobs = stopClaims, abortJobs
	s.stopping = claimCtx
	s.mu.Unlock()
	if s.rescuer != nil {
		if err := s.rescuer.Start(run); err != nil {
			return err // the run context's end stops claims and jobs alike
		}
	}
	s.hooks.start(run)
	for _, name := range s.upstreams {
		w := &worker{s: s, upstream: name, dispatcher: s.cfg.Dispatchers[name], protocol: s.cfg.Protocols[name], jobCtx: jobCtx,
			route: s.cfg.BatchRoutes[name].WithDefaults()}
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			w.loop(claimCtx)
		}()
	}
	for _, r := range s.routers {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			r.loop(claimCtx)
		}()
	}
	return nil
}

// Stop stops claiming, waits for running jobs to finish until ctx ends,
// then aborts those left and hands their leases back (requeued, no
// attempt burnt), stops the rescuer, then stops the webhook sender (POSTs
// in flight get what is left of ctx; pending deliveries stay in the
// store's outbox for the next gateway to send). It is idempotent and safe
// before Start.
func (s *Service) Stop(ctx context.Context) error {
	if err := s.life.Stop(ctx, s.stop); err != nil {
		return fmt.Errorf("stopping job service: %w", err)
	}
	return nil
}

// stop is Stop's order of shutdown.
func (s *Service) stop(ctx context.Context) error {
	s.stopClaims(errShutdown)
	s.loops.Wait() // loops exit promptly: they only wait on claims and signals
	var errs []error
	if !waitGroup(ctx, &s.jobs) {
		s.abortJobs(errShutdown)
		s.jobs.Wait() // aborted jobs return at once; the hand-back is bounded
	}
	s.abortJobs(errShutdown)
	if s.rescuer != nil {
		// A rescue pass is one bounded store call: let it finish.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		errs = append(errs, s.rescuer.Stop(rctx))
		cancel()
	}
	// Deliveries still pending stay in the outbox for the next gateway.
	s.hooks.stop(ctx)
	return errors.Join(errs...)
}

// waitGroup waits for wg or ctx and reports whether wg finished.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// track registers a running job's cancel function.
func (s *Service) track(id int64, cancel context.CancelCauseFunc) {
	s.mu.Lock()
	s.runningJobs[id] = cancel
	s.mu.Unlock()
}

func (s *Service) untrack(id int64) {
	s.mu.Lock()
	delete(s.runningJobs, id)
	s.mu.Unlock()
}

// abort cancels a job's call if it runs in this process.
func (s *Service) abort(id int64, cause error) {
	s.mu.Lock()
	cancel := s.runningJobs[id]
	s.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// Finished returns a channel closed the next time a job finishes in this
// process: a worker wrote its result, or a cancel through this process
// finished it (jobsapi's long polls wait on it).
func (s *Service) Finished() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished
}

// announce wakes long polls after a job finished.
func (s *Service) announce() {
	s.mu.Lock()
	close(s.finished)
	s.finished = make(chan struct{})
	s.mu.Unlock()
}

func (s *Service) uniform() float64 {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.rnd.Float64()
}
