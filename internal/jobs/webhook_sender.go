package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// webhookLeaseSlack is added to Webhooks.Timeout to lease a delivery: the
// lease must outlast the POST and the write of its result, or another
// gateway could send the delivery again while this one still runs it.
const webhookLeaseSlack = 30 * time.Second

// webhookSender delivers the webhook outbox: a loop that leases due
// deliveries from the store (ClaimDeliveries), POSTs each at most
// WebhookConcurrency at a time, and records the result with the lease's
// token: delivered on a 2xx, else due again after a jittered exponential
// backoff until Webhooks.RetryFor has passed since the job finished (or was
// redelivered), then failed. The store writes the outbox rows with the
// jobs' completions, so a delivery survives crashes and restarts of the
// gateway and of the receiver; gateways sharing one PostgreSQL never hold
// the same delivery at once. Every attempt of one delivery carries the
// same webhook-id, which receivers deduplicate by: a receiver that answers
// too late (or a gateway that dies after the POST) gets a repeat, always
// with that id.
//
// The loop wakes when kicked (a job finished here, a redeliver), when an
// attempt ends, and at least every PollInterval (deliveries finished by
// other gateways or the rescuer, retries coming due). It is a part of the
// job service, not a service of its own: the Service's Start starts it
// (start) and its Stop stops it (stop), each once, under the Service's
// lifecycle. stop lets attempts in flight finish until its context ends,
// then cuts them off and puts them back due at once.
type webhookSender struct {
	s       *Service
	backoff flow.Backoff
	kickC   chan struct{}
	slots   chan struct{} // one per POST in flight

	mu       sync.Mutex
	stopped  bool // stop began: claim no more
	cancel   context.CancelCauseFunc
	loopDone chan struct{}
	posts    sync.WaitGroup // POSTs in flight; added to by the loop only
}

func newWebhookSender(s *Service) *webhookSender {
	return &webhookSender{
		s:       s,
		backoff: flow.Backoff{Base: s.cfg.Webhooks.BaseDelay, Max: s.cfg.Webhooks.MaxDelay}.WithDefaults(),
		kickC:   make(chan struct{}, 1),
		slots:   make(chan struct{}, s.cfg.WebhookConcurrency),
	}
}

// kick wakes the loop: a delivery may be due now. It never blocks.
func (h *webhookSender) kick() {
	select {
	case h.kickC <- struct{}{}:
	default:
	}
}

// start runs the delivery loop on run (the job service's run context)
// until stop.
func (h *webhookSender) start(run context.Context) {
	ctx, cancel := context.WithCancelCause(run)
	h.mu.Lock()
	h.cancel, h.loopDone = cancel, make(chan struct{})
	h.mu.Unlock()
	go func() {
		defer close(h.loopDone)
		h.loop(ctx)
	}()
}

// stop stops claiming, waits for the POSTs in flight until ctx ends, then
// cuts them off (they are put back due at once, for the next gateway to
// start).
func (h *webhookSender) stop(ctx context.Context) {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	// Shutdown order: the loop stops claiming (it returns after at most
	// one claim), then the POSTs in flight get ctx's grace, then the rest
	// are cut off.
	h.kick()
	select {
	case <-h.loopDone:
	case <-ctx.Done():
		h.cancel(errShutdown)
		<-h.loopDone
	}
	if !waitGroup(ctx, &h.posts) {
		h.cancel(errShutdown)
		h.posts.Wait()
	}
	h.cancel(errShutdown)
}

func (h *webhookSender) loop(ctx context.Context) {
	cfg := h.s.cfg
	t := cfg.Clock.NewTimer(cfg.PollInterval)
	defer t.Stop()
	for {
		h.mu.Lock()
		stopping := h.stopped
		h.mu.Unlock()
		if stopping || ctx.Err() != nil {
			return
		}
		free := cap(h.slots) - len(h.slots)
		full := false
		if free > 0 {
			ds, err := h.claim(ctx, free)
			if err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("claiming webhook deliveries", "err", err)
			}
			for _, d := range ds {
				h.slots <- struct{}{}
				h.posts.Add(1)
				go func() {
					defer h.posts.Done()
					defer func() { <-h.slots; h.kick() }()
					h.attempt(ctx, d)
				}()
			}
			full = len(ds) == free
		}
		if full {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-h.kickC:
		case <-t.C():
			t.Reset(cfg.PollInterval)
		}
	}
}

// claim leases up to n due deliveries.
func (h *webhookSender) claim(ctx context.Context, n int) ([]*jobstore.WebhookDelivery, error) {
	cfg := h.s.cfg
	ds, err := h.s.store.ClaimDeliveries(ctx, jobstore.ClaimDeliveriesParams{
		Limit: n, LeaseFor: cfg.Webhooks.Timeout + webhookLeaseSlack, Now: cfg.Clock.Now()})
	if err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	return ds, nil
}

// deliverDue claims the deliveries due now (up to WebhookConcurrency),
// attempts them all at once and returns when their results are recorded,
// with how many it attempted. Tests drive the outbox with it on a fake
// clock; the loop does the same work without waiting for a whole batch.
func (h *webhookSender) deliverDue(ctx context.Context) (int, error) {
	ds, err := h.claim(ctx, cap(h.slots))
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.attempt(ctx, d)
		}()
	}
	wg.Wait()
	return len(ds), err
}

// attempt POSTs one claimed delivery and records the result.
func (h *webhookSender) attempt(ctx context.Context, d *jobstore.WebhookDelivery) {
	s := h.s
	cfg := s.cfg
	log := cfg.Logger.With("job", d.JobID, "webhook_id", d.ID, "host", webhookHost(d.WebhookURL))
	if d.BatchID != "" {
		log = cfg.Logger.With("batch", d.BatchID, "webhook_id", d.ID, "host", webhookHost(d.WebhookURL))
	}
	rec := jobstore.RecordDeliveryParams{ID: d.ID, Token: d.Token}
	outcome, postErr := h.post(ctx, d, &rec)
	now := cfg.Clock.Now()
	rec.Now = now
	switch {
	case postErr == nil:
		rec.State = jobstore.DeliveryDelivered
	case ctx.Err() != nil:
		// Cut off by Stop: due again at once, for whichever gateway runs
		// next; the attempt stays counted.
		outcome = WebhookAbandoned
		rec.State, rec.NextAttemptAt = jobstore.DeliveryPending, now
		rec.Error = "the gateway stopped during the attempt"
	default:
		rec.Error = postErr.Error()
		rec.State, rec.NextAttemptAt = h.retryAt(d, now)
		if rec.State == jobstore.DeliveryFailed {
			outcome = WebhookGaveUp
			log.Warn("webhook delivery failed for good", "attempts", d.Attempts, "retried_for", now.Sub(d.RetryFrom).String(), "err", postErr)
		} else {
			log.Debug("webhook delivery failed; retrying", "attempt", d.Attempts, "next_attempt_at", rec.NextAttemptAt, "err", postErr)
		}
	}
	cfg.Observer.Webhook(outcome)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	err := s.store.RecordDelivery(wctx, rec)
	switch {
	case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
		// Redelivered, or its job deleted, meanwhile: the newer state stands.
	case err != nil:
		// Left leased: due again when the lease ends.
		log.Warn("recording webhook delivery", "err", err)
	}
}

// post renders the job (or the batch) and POSTs it, filling rec's
// status. The outcome is delivered or failed (a retry), before the
// caller's adjustments.
func (h *webhookSender) post(ctx context.Context, d *jobstore.WebhookDelivery, rec *jobstore.RecordDeliveryParams) (WebhookOutcome, error) {
	s := h.s
	body, err := h.render(ctx, d)
	if err != nil {
		return WebhookFailed, err
	}
	status, err := s.post(ctx, d.WebhookURL, d.ID, body, s.cfg.Clock.Now())
	rec.Status = status
	if err != nil {
		return WebhookFailed, err
	}
	return WebhookDelivered, nil
}

// retryAt decides a failed attempt's next state at now: pending again
// after the backoff of its attempt count (full jitter), never later than
// the end of its retry window (one last try there); failed once the window
// is over.
func (h *webhookSender) retryAt(d *jobstore.WebhookDelivery, now time.Time) (jobstore.DeliveryState, time.Time) {
	end := d.RetryFrom.Add(h.s.cfg.Webhooks.RetryFor)
	if !now.Before(end) {
		return jobstore.DeliveryFailed, time.Time{}
	}
	next := now.Add(h.backoff.Delay(d.Attempts-1, h.s.uniform()))
	if next.After(end) {
		next = end
	}
	return jobstore.DeliveryPending, next
}

// render is d's body: the finished job as GET /v1/jobs/{id} shows it, or
// a batch's event (jobsapi.NewBatchEvent) with its counts as they stand.
func (h *webhookSender) render(ctx context.Context, d *jobstore.WebhookDelivery) ([]byte, error) {
	st := h.s.store
	if d.BatchID == "" {
		j, err := st.Get(ctx, d.JobID)
		if err != nil {
			return nil, fmt.Errorf("loading the job: %w", err)
		}
		body, err := json.Marshal(jobsapi.NewJobView(j, true))
		if err != nil {
			return nil, fmt.Errorf("encoding the job: %w", err)
		}
		return body, nil
	}
	b, err := st.GetBatch(ctx, d.BatchID)
	if err != nil {
		return nil, fmt.Errorf("loading the batch: %w", err)
	}
	expired := 0
	for after := ""; b.Counts.Dead > 0; {
		page, err := st.BatchJobs(ctx, jobstore.BatchJobsParams{BatchID: b.ID, After: after, Limit: jobstore.ListLimitMax})
		if err != nil {
			return nil, fmt.Errorf("counting the batch's expired jobs: %w", err)
		}
		for _, j := range page.Jobs {
			if jobsapi.Expired(j) {
				expired++
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	body, err := json.Marshal(jobsapi.NewBatchEvent(d, b, expired))
	if err != nil {
		return nil, fmt.Errorf("encoding the batch event: %w", err)
	}
	return body, nil
}
