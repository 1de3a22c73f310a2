package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// deliveryColumns are a delivery row's columns in scan order.
const deliveryColumns = `id, job_id, batch_id, event, state, attempts, lease_token, last_status, last_error,
	created_at, retry_from, next_attempt_at, finished_at, updated_at`

func scanSQLiteDelivery(row interface{ Scan(...any) error }, extra ...any) (*WebhookDelivery, error) {
	d := &WebhookDelivery{}
	var event, state string
	var created, from, next, fin, upd sql.NullInt64
	err := row.Scan(append([]any{&d.ID, &d.JobID, &d.BatchID, &event, &state, &d.Attempts, &d.Token, &d.LastStatus, &d.LastError,
		&created, &from, &next, &fin, &upd}, extra...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	d.setEvent(event)
	d.State = DeliveryState(state)
	d.CreatedAt, d.RetryFrom, d.NextAttemptAt = fromMicros(created), fromMicros(from), fromMicros(next)
	d.FinishedAt, d.UpdatedAt = fromMicros(fin), fromMicros(upd)
	return d, nil
}

func collectSQLiteDeliveries(rows *sql.Rows, withURL bool) ([]*WebhookDelivery, error) {
	defer rows.Close()
	var out []*WebhookDelivery
	for rows.Next() {
		var url string
		var extra []any
		if withURL {
			extra = []any{&url}
		}
		d, err := scanSQLiteDelivery(rows, extra...)
		if err != nil {
			return nil, err
		}
		d.WebhookURL = url
		out = append(out, d)
	}
	return out, rows.Err()
}

func (s *sqliteStore) ClaimDeliveries(ctx context.Context, p ClaimDeliveriesParams) ([]*WebhookDelivery, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	now := micros(p.Now)
	var out []*WebhookDelivery
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		// One writer: the UPDATE is the lease; no other claimer runs
		// between its read and its write.
		rows, err := tx.QueryContext(ctx, `UPDATE sluice_webhook_deliveries
			SET lease_token = lease_token + 1, attempts = attempts + 1, next_attempt_at = ?, updated_at = ?
			WHERE id IN (SELECT id FROM sluice_webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= ?
				ORDER BY next_attempt_at, id LIMIT ?)
			RETURNING `+deliveryColumns+`, coalesce((SELECT webhook_url FROM sluice_jobs j WHERE j.id = job_id),
				(SELECT webhook_url FROM sluice_batch_webhooks b WHERE b.batch_id = sluice_webhook_deliveries.batch_id), '')`,
			micros(p.Now.Add(p.LeaseFor)), now, now, p.Limit)
		if err != nil {
			return err
		}
		out, err = collectSQLiteDeliveries(rows, true)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming webhook deliveries: %w", err)
	}
	sortDeliveries(out)
	return out, nil
}

func (s *sqliteStore) RecordDelivery(ctx context.Context, p RecordDeliveryParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("recording webhook delivery: %w", err)
	}
	now := micros(p.Now)
	next, fin := nullMicros(p.NextAttemptAt), sql.NullInt64{Int64: now, Valid: true}
	if p.State == DeliveryPending {
		fin = sql.NullInt64{}
	} else {
		next = sql.NullInt64{}
	}
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		r, err := tx.ExecContext(ctx, `UPDATE sluice_webhook_deliveries SET state = ?, last_status = ?, last_error = ?,
			next_attempt_at = ?, finished_at = ?, updated_at = ? WHERE id = ? AND lease_token = ? AND state = 'pending'`,
			string(p.State), p.Status, p.Error, next, fin, now, p.ID, p.Token)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n > 0 {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM sluice_webhook_deliveries WHERE id = ?`, p.ID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return ErrLeaseLost
	})
	if err != nil {
		return fmt.Errorf("recording webhook delivery %s: %w", p.ID, err)
	}
	return nil
}

func (s *sqliteStore) Deliveries(ctx context.Context, jobID int64) ([]*WebhookDelivery, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM sluice_webhook_deliveries
		WHERE job_id = ? AND batch_id = '' ORDER BY created_at, id`, jobID)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of job %d: %w", jobID, err)
	}
	out, err := collectSQLiteDeliveries(rows, false)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of job %d: %w", jobID, err)
	}
	return out, nil
}

func (s *sqliteStore) BatchDeliveries(ctx context.Context, batchID string) ([]*WebhookDelivery, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM sluice_webhook_deliveries
		WHERE batch_id = ? AND batch_id <> '' ORDER BY created_at, id`, batchID)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of batch %s: %w", batchID, err)
	}
	out, err := collectSQLiteDeliveries(rows, false)
	if err != nil {
		return nil, fmt.Errorf("listing webhook deliveries of batch %s: %w", batchID, err)
	}
	return out, nil
}

func (s *sqliteStore) Redeliver(ctx context.Context, p RedeliverParams) (*WebhookDelivery, error) {
	if p.Now.IsZero() {
		return nil, fmt.Errorf("redelivering webhook: %w", invalid("Now", "required"))
	}
	now := micros(p.Now)
	var d *WebhookDelivery
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var err error
		d, err = scanSQLiteDelivery(tx.QueryRowContext(ctx, `UPDATE sluice_webhook_deliveries
			SET state = 'pending', lease_token = lease_token + 1, retry_from = ?, next_attempt_at = ?, finished_at = NULL, updated_at = ?
			WHERE id = (SELECT id FROM sluice_webhook_deliveries WHERE job_id = ? AND batch_id = '' ORDER BY created_at DESC, id DESC LIMIT 1)
			RETURNING `+deliveryColumns, now, now, now, p.JobID))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redelivering the webhook of job %d: %w", p.JobID, err)
	}
	return d, nil
}

func (s *sqliteStore) DeliveryStats(ctx context.Context) (DeliveryStats, error) {
	var n int
	var oldest sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT count(*), min(created_at) FROM sluice_webhook_deliveries
		WHERE state = 'pending'`).Scan(&n, &oldest)
	if err != nil {
		return DeliveryStats{}, fmt.Errorf("counting pending webhook deliveries: %w", err)
	}
	return DeliveryStats{Pending: n, OldestPending: fromMicros(oldest)}, nil
}
