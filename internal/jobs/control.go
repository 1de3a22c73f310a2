package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Cancel cancels job id. A running job's upstream call is aborted at once
// when it runs in this process, and by its heartbeat (lease lost) when it
// runs in another.
func (s *Service) Cancel(ctx context.Context, id int64) (*jobstore.Job, error) {
	res, err := s.store.Cancel(ctx, jobstore.CancelParams{ID: id, Now: s.cfg.Clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("canceling job %d: %w", id, err)
	}
	if res.WasRunning {
		s.abort(id, errJobCanceled)
	}
	if !res.WasLive {
		return res.Job, nil // canceled before: counted and announced then
	}
	s.cfg.Observer.Finished(res.Job.Upstream, jobstore.StateCanceled, 1)
	s.announce()
	if res.Job.WebhookURL != "" {
		s.hooks.kick() // the store wrote its outbox row with the cancel
	}
	return res.Job, nil
}

// waitFinished returns job id once it is finished, or as it is when wait
// passes first (or ctx ends: then the error is ctx's, with the job last
// seen).
func (s *Service) waitFinished(ctx context.Context, id int64, wait time.Duration) (*jobstore.Job, error) {
	j, err := s.store.Get(ctx, id)
	if err != nil || wait <= 0 || j.State.Finished() {
		return j, err
	}
	deadline := s.cfg.Clock.NewTimer(wait)
	defer deadline.Stop()
	poll := s.cfg.Clock.NewTimer(s.cfg.PollInterval)
	defer poll.Stop()
	for {
		changed := s.changed()
		select {
		case <-ctx.Done():
			return j, context.Cause(ctx)
		case <-deadline.C():
			return j, nil
		case <-changed:
		case <-poll.C():
			poll.Reset(s.cfg.PollInterval)
		}
		next, err := s.store.Get(ctx, id)
		if err != nil {
			return j, err
		}
		j = next
		if j.State.Finished() {
			return j, nil
		}
	}
}
