package jobsapi

import (
	"cmp"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Batch completion webhooks (docs/jobs-api.md, "Batch webhooks"). A batch
// names the URL its end is POSTed to when it is created, on any of the
// three doors (POST /v1/batches, Anthropic's and OpenAI's batch creates),
// in a way the official SDKs can send without a field of their own: the
// WebhookHeader request header (the SDKs' per-request or default
// headers), or, on OpenAI's create, the batch's metadata under
// WebhookMetadataKey (metadata is a field of the SDKs' create). The store
// writes the delivery when the batch's last job finishes; the job
// runtime's sender POSTs NewBatchEvent's body, signed and retried as a
// job's webhook.

// WebhookHeader names a batch's completion webhook URL on its create.
const WebhookHeader = "X-Sluice-Webhook-Url"

// WebhookMetadataKey is the OpenAI batch metadata key that names the
// batch's completion webhook URL when the create has no WebhookHeader.
const WebhookMetadataKey = "sluice_webhook_url"

// batchWebhook is the webhook URL a batch create names: WebhookHeader,
// else fromMetadata (an OpenAI create's metadata value; "" for none),
// vetted as a job's webhook_url. Empty for none.
func (a *API) batchWebhook(r *http.Request, fromMetadata string) (string, error) {
	if v := r.Header.Get(WebhookHeader); v != "" {
		return v, a.checkWebhookURL(r.Context(), WebhookHeader, v)
	}
	return fromMetadata, a.checkWebhookURL(r.Context(), "metadata."+WebhookMetadataKey, fromMetadata)
}

// BatchEvent is the body of a batch's completion webhook, in the shape of
// OpenAI's webhook events ({"object":"event","type":"batch.completed",
// "data":{"id":…}}), so that OpenAI's SDKs can unwrap it.
type BatchEvent struct {
	// ID is the delivery's id: the webhook-id header of every attempt.
	ID     string `json:"id"`
	Object string `json:"object"`
	// Type is batch.completed, batch.failed, batch.expired or
	// batch.cancelled.
	Type jobstore.BatchEvent `json:"type"`
	// CreatedAt is when the batch ended, Unix seconds.
	CreatedAt int64          `json:"created_at"`
	Data      BatchEventData `json:"data"`
}

// BatchEventData is the batch as it stood when the webhook was sent.
type BatchEventData struct {
	// ID is the batch's id on the door it was created on (batch_…,
	// msgbatch_…): GET it there for its results.
	ID       string      `json:"id"`
	Upstream string      `json:"upstream,omitempty"`
	Format   string      `json:"format"`
	Total    int         `json:"total"`
	Counts   StateCounts `json:"counts"`
	// Expired counts the dead jobs that died of their deadline unsent.
	Expired   int        `json:"expired"`
	CreatedAt time.Time  `json:"created_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// CancelRequestedAt is when a cancel was asked for, if one was.
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
}

// NewBatchEvent renders batch delivery d of batch b, expired of whose
// dead jobs died of their deadline.
func NewBatchEvent(d *jobstore.WebhookDelivery, b *jobstore.Batch, expired int) BatchEvent {
	c := b.Counts
	data := BatchEventData{ID: b.ID, Upstream: b.Upstream, Format: string(b.Format), Total: b.Total, Expired: expired,
		Counts:    StateCounts{Queued: c.Queued, Running: c.Running, Succeeded: c.Succeeded, Dead: c.Dead, Canceled: c.Canceled},
		CreatedAt: b.CreatedAt}
	if !b.EndedAt.IsZero() {
		t := b.EndedAt
		data.EndedAt = &t
	}
	if !b.CancelRequestedAt.IsZero() {
		t := b.CancelRequestedAt
		data.CancelRequestedAt = &t
	}
	return BatchEvent{ID: d.ID, Object: "event", Type: cmp.Or(d.BatchEvent, jobstore.BatchCompleted),
		CreatedAt: d.CreatedAt.Unix(), Data: data}
}

// Expired reports whether j, a job of a batch, died of its deadline before
// it was sent (the providers' "expired").
func Expired(j *jobstore.Job) bool { return expired(j) }
