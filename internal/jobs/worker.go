package jobs

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// worker is one upstream's claim loop.
type worker struct {
	s          *Service
	upstream   string
	dispatcher Dispatcher
	protocol   llm.Protocol
	jobCtx     context.Context // parent of every job's context; aborted by Stop
}

// loop claims jobs while fewer than MaxInFlightPerUpstream are running and
// starts each in its own goroutine, until ctx ends. While the queue has
// nothing for it (its last claim came back short) it offers its free slots
// through a jobstore.Handoff, so jobs submitted meanwhile start without a claim;
// it claims again when woken by Notify, by the poll timer, or by a finished
// job after a full claim.
func (w *worker) loop(ctx context.Context) {
	cfg := w.s.cfg
	done := make(chan struct{}, cfg.MaxInFlightPerUpstream)
	notify := w.s.store.Notify(ctx, w.upstream)
	timer := cfg.Clock.NewTimer(cfg.PollInterval)
	defer timer.Stop()
	inFlight := 0
	start := func(j *jobstore.Job) {
		inFlight++
		w.s.jobs.Add(1)
		go func() {
			defer w.s.jobs.Done()
			w.run(j)
			done <- struct{}{}
		}()
	}
	h, err := w.s.store.Handoff(jobstore.HandoffParams{Upstream: w.upstream, Owner: cfg.Owner,
		LeaseFor: cfg.LeaseFor, Capacity: cfg.MaxInFlightPerUpstream})
	if err != nil {
		cfg.Logger.Warn("registering job handoff", "upstream", w.upstream, "err", err)
	}
	var handed <-chan *jobstore.Job
	if h != nil {
		handed = h.Jobs()
		defer func() {
			// Jobs leased to this worker run (and, at shutdown, are handed back at once).
			for _, j := range h.Close() {
				start(j)
			}
		}()
	}
	pending := func() int {
		if h == nil {
			return 0
		}
		return h.Pending()
	}
	claimNow, full := true, false
	for {
		// Collect finished jobs without blocking.
		for drained := false; !drained; {
			select {
			case <-done:
				inFlight--
			default:
				drained = true
			}
		}
		if claimNow {
			claimNow = false
			for received := false; !received; {
				select {
				case j := <-handed:
					start(j)
				default:
					received = true
				}
			}
			// The claim gets up to a batch of slots; what stays offered
			// keeps taking inserts meanwhile.
			held := 0
			if h != nil {
				held = h.Withdraw(cfg.ClaimBatch)
			}
			free := cfg.MaxInFlightPerUpstream - inFlight - held
			full = free <= 0
			if free > 0 {
				limit := min(free, cfg.ClaimBatch)
				claimed := w.claim(ctx, limit, start)
				if claimed == limit && h != nil {
					h.Withdraw(-1) // more may be queued: they go before new jobs
				}
				if claimed == limit && cfg.MaxInFlightPerUpstream-inFlight-pending() > 0 {
					claimNow = true
					continue // there may be more right now
				}
				full = claimed == limit
				wait := cfg.PollInterval
				if claimed == 0 {
					if at, ok, err := w.s.store.NextAvailable(ctx, w.upstream); err == nil && ok {
						wait = min(wait, max(at.Sub(cfg.Clock.Now()), time.Millisecond))
					}
				}
				timer.Stop()
				timer.Reset(wait)
			}
		}
		if ctx.Err() != nil {
			return
		}
		if h != nil && !full {
			h.Offer(cfg.MaxInFlightPerUpstream - inFlight - pending())
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			inFlight--
			claimNow = full // a slot freed while more may be queued
		case j := <-handed:
			start(j)
		case _, ok := <-notify:
			if !ok {
				return
			}
			claimNow = true
		case <-timer.C():
			claimNow = true
		}
	}
}

// claim claims up to limit jobs and starts each; it returns how many.
func (w *worker) claim(ctx context.Context, limit int, start func(*jobstore.Job)) int {
	cfg := w.s.cfg
	jobs, err := w.s.store.Claim(ctx, jobstore.ClaimParams{
		Upstream: w.upstream,
		Limit:    limit,
		Owner:    cfg.Owner,
		LeaseFor: cfg.LeaseFor,
		Now:      cfg.Clock.Now(),
	})
	if err != nil && ctx.Err() == nil {
		cfg.Logger.Warn("claiming jobs", "upstream", w.upstream, "err", err)
	}
	for _, j := range jobs {
		start(j)
	}
	return len(jobs)
}
