package batches

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// Anthropic Message Batches: POST /v1/messages/batches with every request
// inline ({"requests":[{"custom_id","params"}]}), GET, cancel, results
// (JSONL), DELETE.

func (c *Client) createAnthropic(ctx context.Context, p CreateParams) (*Batch, error) {
	if p.Endpoint != "" && p.Endpoint != "/v1/messages" {
		return nil, fmt.Errorf("creating the batch: %w: Anthropic batches carry /v1/messages requests, not %s", ErrInvalid, p.Endpoint)
	}
	var body bytes.Buffer
	body.WriteString(`{"requests":[`)
	for i, l := range p.Lines {
		if i > 0 {
			body.WriteByte(',')
		}
		id, err := json.Marshal(l.CustomID)
		if err != nil {
			return nil, fmt.Errorf("creating the batch: %w", err)
		}
		body.WriteString(`{"custom_id":`)
		body.Write(id)
		body.WriteString(`,"params":`)
		body.Write(bytes.TrimSpace(l.Body))
		body.WriteByte('}')
	}
	body.WriteString(`]}`)
	return c.anthropicBatch(ctx, request{op: "creating the batch", method: http.MethodPost, path: "/v1/messages/batches", body: &body})
}

func (c *Client) anthropicBatch(ctx context.Context, r request) (*Batch, error) {
	var mb llm.MessageBatch
	if err := c.call(ctx, r, &mb); err != nil {
		return nil, err
	}
	return fromMessageBatch(mb), nil
}

func fromMessageBatch(mb llm.MessageBatch) *Batch {
	n := mb.RequestCounts
	b := &Batch{ID: mb.ID, Status: mb.ProcessingStatus, Ended: mb.ProcessingStatus == llm.MessageBatchEnded,
		CreatedAt: mb.CreatedAt, ExpiresAt: mb.ExpiresAt,
		Counts: Counts{Total: n.Processing + n.Succeeded + n.Errored + n.Canceled + n.Expired, Processing: n.Processing,
			Succeeded: n.Succeeded, Errored: n.Errored, Canceled: n.Canceled, Expired: n.Expired}}
	b.EndedAt = deref(mb.EndedAt)
	b.CancelAt = deref(mb.CancelInitiatedAt)
	return b
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
