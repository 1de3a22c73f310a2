package jobs

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/queue"
)

// worker is one upstream's claim loop.
type worker struct {
	s          *Service
	upstream   string
	dispatcher Dispatcher
	protocol   provider.Protocol
	jobCtx     context.Context // parent of every job's context; aborted by Stop
}

// loop claims jobs while fewer than MaxInFlightPerUpstream are running and
// starts each in its own goroutine, until ctx ends.
func (w *worker) loop(ctx context.Context) {
	cfg := w.s.cfg
	done := make(chan struct{}, cfg.MaxInFlightPerUpstream)
	notify := w.s.store.Notify(ctx, w.upstream)
	timer := cfg.Clock.NewTimer(cfg.PollInterval)
	defer timer.Stop()
	inFlight := 0
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
		free := cfg.MaxInFlightPerUpstream - inFlight
		claimed := 0
		if free > 0 {
			jobs, err := w.s.store.Claim(ctx, queue.ClaimParams{
				Upstream: w.upstream,
				Limit:    min(free, cfg.ClaimBatch),
				Owner:    cfg.Owner,
				LeaseFor: cfg.LeaseFor,
				Now:      cfg.Clock.Now(),
			})
			if err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("claiming jobs", "upstream", w.upstream, "err", err)
			}
			for _, j := range jobs {
				inFlight++
				w.s.jobs.Add(1)
				go func() {
					defer w.s.jobs.Done()
					w.run(j)
					done <- struct{}{}
				}()
			}
			claimed = len(jobs)
			if claimed == min(free, cfg.ClaimBatch) && claimed < free {
				continue // there may be more right now
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := cfg.PollInterval
		if free > 0 && claimed == 0 {
			if at, ok, err := w.s.store.NextAvailable(ctx, w.upstream); err == nil && ok {
				wait = min(wait, max(at.Sub(cfg.Clock.Now()), time.Millisecond))
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-done:
			inFlight--
		case _, ok := <-notify:
			if !ok {
				return
			}
		case <-timer.C():
		}
		timer.Stop()
	}
}
