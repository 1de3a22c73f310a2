package jobstore

import (
	"cmp"
	"slices"
	"time"
)

// DeliveryState is where a webhook delivery stands.
type DeliveryState string

// The delivery states.
const (
	// DeliveryPending: not yet accepted by the receiver; the delivery loop
	// tries it at NextAttemptAt.
	DeliveryPending DeliveryState = "pending"
	// DeliveryDelivered: the receiver answered 2xx.
	DeliveryDelivered DeliveryState = "delivered"
	// DeliveryFailed: the retry window passed without a 2xx; only a
	// redeliver tries it again.
	DeliveryFailed DeliveryState = "failed"
)

// WebhookDelivery is one completion webhook owed to a job's webhook_url,
// or to a batch's (CreateBatchParams.WebhookURL): the outbox row the store
// writes in the same transaction that finishes the job, or the batch's
// last job (any path: complete, fail, cancel, batch cancel, the router's
// write-back, rescue). A job or batch that finishes again after a requeue
// owes a new delivery, with a new ID.
type WebhookDelivery struct {
	// ID is the stable delivery id ("msg_" and 32 hex digits): the same on
	// every attempt, so receivers deduplicate by it (webhook-id).
	ID string
	// JobID is the job's id, 0 for a batch's delivery.
	JobID int64
	// BatchID is the batch's id for a batch's delivery, empty for a job's.
	BatchID string
	// Event is the state the job finished in (a job's delivery).
	Event State
	// BatchEvent is what became of the batch (a batch's delivery).
	BatchEvent BatchEvent
	State      DeliveryState
	// Attempts counts the POSTs started (each claim is one).
	Attempts int
	// LastStatus is the receiver's last HTTP status (0 when it did not
	// answer); LastError says why the last attempt failed.
	LastStatus int
	LastError  string
	// CreatedAt is the event's time: when the job finished.
	CreatedAt time.Time
	// RetryFrom starts the retry window: CreatedAt, or the last redeliver.
	RetryFrom time.Time
	// NextAttemptAt is when a pending delivery is next due (while an
	// attempt runs, when its lease ends); zero otherwise.
	NextAttemptAt time.Time
	// FinishedAt is when it was delivered or marked failed.
	FinishedAt time.Time
	UpdatedAt  time.Time
	// Token fences the result of the attempt a claim started.
	Token int64
	// WebhookURL is the job's or batch's webhook URL (filled by
	// ClaimDeliveries).
	WebhookURL string
}

// BatchEvent is the event of a batch's delivery: how the batch ended, in
// the event names OpenAI's webhooks use.
type BatchEvent string

// The batch events.
const (
	// BatchCompleted: every job finished (succeeded, or dead of its own
	// error), none canceled or expired.
	BatchCompleted BatchEvent = "batch.completed"
	// BatchFailed: the batch was refused whole at its creation (an OpenAI
	// batch whose input failed its validation): no job was queued.
	BatchFailed BatchEvent = "batch.failed"
	// BatchExpired: a job died of its deadline before it was sent (the
	// providers' 24-hour window).
	BatchExpired BatchEvent = "batch.expired"
	// BatchCancelled: a cancel was asked for before the batch ended.
	BatchCancelled BatchEvent = "batch.cancelled"
)

// setEvent sets d's event from its stored name: a batch's or a job's.
func (d *WebhookDelivery) setEvent(event string) {
	if d.BatchID != "" {
		d.BatchEvent = BatchEvent(event)
		return
	}
	d.Event = State(event)
}

// ClaimDeliveriesParams leases due deliveries.
type ClaimDeliveriesParams struct {
	// Limit is how many at most; at least 1.
	Limit int
	// LeaseFor is how long the attempt may take before another claimer may
	// take the delivery again; positive. It must outlast the POST.
	LeaseFor time.Duration
	Now      time.Time
}

func (p *ClaimDeliveriesParams) validate() error {
	switch {
	case p.Limit < 1:
		return invalid("Limit", "%d is below 1", p.Limit)
	case p.LeaseFor <= 0:
		return invalid("LeaseFor", "%v is not positive", p.LeaseFor)
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	return nil
}

// RecordDeliveryParams records the result of one claimed attempt, fenced
// by the claim's token.
type RecordDeliveryParams struct {
	ID    string
	Token int64
	// State is DeliveryDelivered (a 2xx), DeliveryPending (failed: retry at
	// NextAttemptAt) or DeliveryFailed (failed and the retry window is over).
	State DeliveryState
	// Status is the receiver's HTTP status, 0 when it did not answer.
	Status int
	// Error says why the attempt failed; empty when delivered.
	Error string
	// NextAttemptAt is required with DeliveryPending.
	NextAttemptAt time.Time
	Now           time.Time
}

func (p *RecordDeliveryParams) validate() error {
	switch {
	case p.ID == "":
		return invalid("ID", "required")
	case p.State != DeliveryDelivered && p.State != DeliveryPending && p.State != DeliveryFailed:
		return invalid("State", "%q is not a delivery state", p.State)
	case p.State == DeliveryPending && p.NextAttemptAt.IsZero():
		return invalid("NextAttemptAt", "required to retry")
	case p.Now.IsZero():
		return invalid("Now", "required")
	}
	return nil
}

// RedeliverParams makes a job's latest delivery pending and due at Now,
// with the same ID, a fresh retry window from Now, and a new token (an
// attempt in flight can no longer record its result).
type RedeliverParams struct {
	JobID int64
	Now   time.Time
}

// DeliveryStats summarises the pending deliveries.
type DeliveryStats struct {
	Pending int
	// OldestPending is the CreatedAt of the oldest pending delivery; zero
	// when none is pending.
	OldestPending time.Time
}

// sortDeliveries puts claimed deliveries in claim order (RETURNING has
// none).
func sortDeliveries(ds []*WebhookDelivery) {
	slices.SortFunc(ds, func(a, b *WebhookDelivery) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}
