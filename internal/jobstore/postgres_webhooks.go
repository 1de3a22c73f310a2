package jobstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

func scanPgDelivery(row pgx.Row, extra ...any) (*WebhookDelivery, error) {
	d := &WebhookDelivery{}
	var event, state string
	var attempts, status int32
	var created, from, next, fin, upd pgtype.Timestamptz
	err := row.Scan(append([]any{&d.ID, &d.JobID, &d.BatchID, &event, &state, &attempts, &d.Token, &status, &d.LastError,
		&created, &from, &next, &fin, &upd}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	d.setEvent(event)
	d.State, d.Attempts, d.LastStatus = DeliveryState(state), int(attempts), int(status)
	d.CreatedAt, d.RetryFrom, d.NextAttemptAt = fromPgTime(created), fromPgTime(from), fromPgTime(next)
	d.FinishedAt, d.UpdatedAt = fromPgTime(fin), fromPgTime(upd)
	return d, nil
}

func collectPgDeliveries(rows pgx.Rows, withURL bool) ([]*WebhookDelivery, error) {
	defer rows.Close()
	var out []*WebhookDelivery
	for rows.Next() {
		var url string
		var extra []any
		if withURL {
			extra = []any{&url}
		}
		d, err := scanPgDelivery(rows, extra...)
		if err != nil {
			return nil, err
		}
		d.WebhookURL = url
		out = append(out, d)
	}
	return out, rows.Err()
}

// pgClaimDeliveries leases due deliveries: SKIP LOCKED lets gateways on one
// database claim at once without waiting on each other or taking the same
// row; = ANY(ARRAY(…)) probes the primary key (see pgClaim). The URL is
// the job's, or the batch's for a batch's delivery.
const pgClaimDeliveries = `UPDATE sluice_webhook_deliveries d
	SET lease_token = d.lease_token + 1, attempts = d.attempts + 1, next_attempt_at = $1, updated_at = $2
	WHERE d.id = ANY(ARRAY(SELECT id FROM sluice_webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= $2
			ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED))
	RETURNING d.id, d.job_id, d.batch_id, d.event, d.state, d.attempts, d.lease_token, d.last_status, d.last_error,
		d.created_at, d.retry_from, d.next_attempt_at, d.finished_at, d.updated_at,
		coalesce((SELECT j.webhook_url FROM sluice_jobs j WHERE j.id = d.job_id AND d.batch_id = ''),
			(SELECT b.webhook_url FROM sluice_batch_webhooks b WHERE b.batch_id = d.batch_id AND d.batch_id <> ''), '')`

func (s *postgresStore) ClaimDeliveries(ctx context.Context, p ClaimDeliveriesParams) ([]*WebhookDelivery, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	rows, err := s.pool.Query(ctx, pgClaimDeliveries, pgTime(p.Now.Add(p.LeaseFor)), pgTime(p.Now), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	out, err := collectPgDeliveries(rows, true)
	if err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	sortDeliveries(out)
	return out, nil
}

func (s *postgresStore) RecordDelivery(ctx context.Context, p RecordDeliveryParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("recording webhook delivery: %w", err)
	}
	next, fin := pgTime(p.NextAttemptAt), pgTime(p.Now)
	if p.State == DeliveryPending {
		fin = pgtype.Timestamptz{}
	} else {
		next = pgtype.Timestamptz{}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE sluice_webhook_deliveries SET state = $1, last_status = $2, last_error = $3,
		next_attempt_at = $4, finished_at = $5, updated_at = $6 WHERE id = $7 AND lease_token = $8 AND state = 'pending'`,
		string(p.State), p.Status, p.Error, next, fin, pgTime(p.Now), p.ID, p.Token)
	if err == nil && tag.RowsAffected() == 0 {
		var one int
		err = s.pool.QueryRow(ctx, `SELECT 1 FROM sluice_webhook_deliveries WHERE id = $1`, p.ID).Scan(&one)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = ErrNotFound
		case err == nil:
			err = ErrLeaseLost
		}
	}
	if err != nil {
		return fmt.Errorf("recording webhook delivery %s: %w", p.ID, err)
	}
	return nil
}

func (s *postgresStore) Deliveries(ctx context.Context, jobID int64) ([]*WebhookDelivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM sluice_webhook_deliveries
		WHERE job_id = $1 AND batch_id = '' ORDER BY created_at, id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of job %d: %w", jobID, err)
	}
	out, err := collectPgDeliveries(rows, false)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of job %d: %w", jobID, err)
	}
	return out, nil
}

func (s *postgresStore) BatchDeliveries(ctx context.Context, batchID string) ([]*WebhookDelivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM sluice_webhook_deliveries
		WHERE batch_id = $1 AND batch_id <> '' ORDER BY created_at, id`, batchID)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of batch %s: %w", batchID, err)
	}
	out, err := collectPgDeliveries(rows, false)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of batch %s: %w", batchID, err)
	}
	return out, nil
}

func (s *postgresStore) Redeliver(ctx context.Context, p RedeliverParams) (*WebhookDelivery, error) {
	if p.Now.IsZero() {
		return nil, fmt.Errorf("redelivering webhook: %w", invalid("Now", "required"))
	}
	now := pgTime(p.Now)
	d, err := scanPgDelivery(s.pool.QueryRow(ctx, `UPDATE sluice_webhook_deliveries
		SET state = 'pending', lease_token = lease_token + 1, retry_from = $1, next_attempt_at = $1, finished_at = NULL, updated_at = $1
		WHERE id = (SELECT id FROM sluice_webhook_deliveries WHERE job_id = $2 AND batch_id = '' ORDER BY created_at DESC, id DESC LIMIT 1)
		RETURNING `+deliveryColumns, now, p.JobID))
	if err != nil {
		return nil, fmt.Errorf("redelivering the webhook of job %d: %w", p.JobID, err)
	}
	return d, nil
}

func (s *postgresStore) DeliveryStats(ctx context.Context) (DeliveryStats, error) {
	var n int64
	var oldest pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM sluice_webhook_deliveries
		WHERE state = 'pending'`).Scan(&n, &oldest)
	if err != nil {
		return DeliveryStats{}, fmt.Errorf("counting pending webhook deliveries: %w", err)
	}
	return DeliveryStats{Pending: int(n), OldestPending: fromPgTime(oldest)}, nil
}
