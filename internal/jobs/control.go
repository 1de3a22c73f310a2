package jobs

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// The operations of the job API that reach past the store: the jobs
// running in this process and the webhook sender. *Service implements
// jobsapi.Runtime with them.
var _ jobsapi.Runtime = (*Service)(nil)

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

// CancelBatch cancels the live jobs of batch id, as Cancel does each.
func (s *Service) CancelBatch(ctx context.Context, id string) (jobstore.CancelBatchResult, error) {
	res, err := s.store.CancelBatch(ctx, jobstore.CancelBatchParams{BatchID: id, Now: s.cfg.Clock.Now()})
	if err != nil {
		return res, fmt.Errorf("canceling batch %s: %w", id, err)
	}
	for _, jid := range res.Running {
		s.abort(jid, errJobCanceled)
	}
	s.announce()
	if res.Canceled > 0 {
		s.hooks.kick() // jobs with a webhook_url got their outbox rows
		s.observeBatchCanceled(ctx, id, res.Canceled)
	}
	return res, nil
}

// CancelRun cancels the live jobs of run id (of client, unless client is
// ""), as Cancel does each.
func (s *Service) CancelRun(ctx context.Context, id, client string) (jobstore.CancelRunResult, error) {
	res, err := s.store.CancelRun(ctx, jobstore.CancelRunParams{RunID: id, Client: client, Now: s.cfg.Clock.Now()})
	if err != nil {
		return res, fmt.Errorf("canceling run %s: %w", id, err)
	}
	for _, jid := range res.Running {
		s.abort(jid, errJobCanceled)
	}
	if res.Total() == 0 {
		return res, nil
	}
	s.announce()
	s.hooks.kick() // jobs with a webhook_url got their outbox rows
	for upstream, n := range res.Canceled {
		s.cfg.Observer.Finished(upstream, jobstore.StateCanceled, n)
	}
	return res, nil
}

// observeBatchCanceled reports n jobs of batch id canceled. A batch's jobs
// share one upstream (the API creates them so), read from its first job.
// The cancel is done: a caller that goes away now must not lose its count.
func (s *Service) observeBatchCanceled(ctx context.Context, id string, n int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	page, err := s.store.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: id, Limit: 1})
	if err != nil || len(page.Jobs) == 0 {
		s.cfg.Logger.Warn("reading a canceled batch's upstream for metrics", "batch", id, "err", err)
		return
	}
	s.cfg.Observer.Finished(page.Jobs[0].Upstream, jobstore.StateCanceled, n)
}

// Redeliver makes job id's latest webhook delivery pending and due at
// once, with the same id, and wakes the webhook sender.
func (s *Service) Redeliver(ctx context.Context, id int64) (*jobstore.WebhookDelivery, error) {
	d, err := s.store.Redeliver(ctx, jobstore.RedeliverParams{JobID: id, Now: s.cfg.Clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("redelivering the webhook of job %d: %w", id, err)
	}
	s.hooks.kick()
	return d, nil
}
