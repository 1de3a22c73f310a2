package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

func (s *sqliteStore) CreateBatch(ctx context.Context, p CreateBatchParams) (*Batch, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating batch: %w", err)
	}
	id := p.ID
	now := storeTime(p.Now)
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_batches (id, format, total, created_at, client, upstream, attrs, keep_until)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			id, string(p.Format), len(p.Jobs), micros(now), p.Client, p.Upstream, p.Attrs, nullMicros(p.KeepUntil)); err != nil {
			return mapSQLiteErr(err)
		}
		if p.WebhookURL != "" {
			// Before the jobs: the trigger of a batch with none open reads the
			// batch.
			if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_batch_webhooks (batch_id, webhook_url, open_jobs) VALUES (?, ?, ?)`,
				id, p.WebhookURL, p.openJobs()); err != nil {
				return mapSQLiteErr(err)
			}
		}
		stmt, err := tx.PrepareContext(ctx, sqliteInsert)
		if err != nil {
			return err
		}
		defer stmt.Close()
		var ups []string
		for _, j := range p.Jobs {
			j = j.normalized()
			if j.Dead != nil {
				if _, err := tx.ExecContext(ctx, sqliteInsertDead, sqliteInsertDeadArgs(j, id)...); err != nil {
					return mapSQLiteErr(err)
				}
				continue
			}
			if _, err := stmt.ExecContext(ctx, sqliteInsertArgs(j, id)...); err != nil {
				return mapSQLiteErr(err)
			}
			ups = append(ups, j.Upstream)
		}
		*sig = append(*sig, distinct(ups)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("creating batch: %w", err)
	}
	return newBatch(p, now), nil
}

// sqliteInsertDead inserts a batch's job already dead (InsertParams.Dead);
// its arguments are sqliteInsertArgs then its errors (a JSON array), its
// kept error answer (status, header, body: NULL for none) and its finish.
const sqliteInsertDead = `INSERT INTO sluice_jobs (idempotency_key, upstream, priority, client, path, body,
	deadline, max_attempts, state, available_at, batch_id, custom_id, webhook_url, created_at, updated_at, run_id,
	errors, result_status, result_header, result_body, finished_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'dead', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func sqliteInsertDeadArgs(p InsertParams, batchID string) []any {
	args := append(sqliteInsertArgs(p, batchID), "["+string(encodeAttemptError(p.deadError()))+"]")
	if r := p.DeadResult; r != nil {
		args = append(args, r.Status, encodeHeader(r.Header), nonNil(r.Body))
	} else {
		args = append(args, nil, nil, nil)
	}
	return append(args, micros(p.Now))
}

// countInto adds n jobs in state to c.
func (c *BatchCounts) add(state State, n int) {
	switch state {
	case StateQueued:
		c.Queued += n
	case StateRunning:
		c.Running += n
	case StateSucceeded:
		c.Succeeded += n
	case StateDead:
		c.Dead += n
	case StateCanceled:
		c.Canceled += n
	}
}

func (s *sqliteStore) GetBatch(ctx context.Context, id string) (*Batch, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("getting batch %s: %w", id, err)
	}
	defer func() { _ = tx.Rollback() }()
	b := &Batch{ID: id}
	var format string
	var created, cancel, keep sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT format, total, created_at, client, upstream, attrs, cancel_requested_at, keep_until,
		coalesce((SELECT webhook_url FROM sluice_batch_webhooks w WHERE w.batch_id = sluice_batches.id), '')
		FROM sluice_batches WHERE id = ?`, id).Scan(&format, &b.Total, &created, &b.Client, &b.Upstream, &b.Attrs, &cancel, &keep, &b.WebhookURL)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("getting batch %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting batch %s: %w", id, err)
	}
	b.Format, b.CreatedAt = providerProtocol(format), fromMicros(created)
	b.CancelRequestedAt, b.KeepUntil = fromMicros(cancel), fromMicros(keep)
	rows, err := tx.QueryContext(ctx, `SELECT state, count(*), max(finished_at) FROM sluice_jobs WHERE batch_id = ? GROUP BY state`, id)
	if err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
	defer rows.Close()
	var last time.Time
	for rows.Next() {
		var st string
		var n int
		var finished sql.NullInt64
		if err := rows.Scan(&st, &n, &finished); err != nil {
			return nil, fmt.Errorf("counting batch %s: %w", id, err)
		}
		b.Counts.add(State(st), n)
		if f := fromMicros(finished); f.After(last) {
			last = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
	b.setEnded(last)
	return b, nil
}

func (s *sqliteStore) BatchJobs(ctx context.Context, p BatchJobsParams) (BatchPage, error) {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM sluice_batches WHERE id = ?`, p.BatchID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, ErrNotFound)
	}
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, err)
	}
	limit := pageLimit(p.Limit)
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE batch_id = ? AND custom_id > ?
		ORDER BY custom_id LIMIT ?`, p.BatchID, p.After, limit+1)
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, err)
	}
	jobs, err := collectSQLiteJobs(rows)
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, err)
	}
	return batchPage(jobs, limit), nil
}

func batchPage(jobs []*Job, limit int) BatchPage {
	page := BatchPage{Jobs: jobs}
	if len(jobs) > limit {
		page.Jobs = jobs[:limit]
		page.Next = jobs[limit-1].CustomID
	}
	return page
}

func (s *sqliteStore) CancelBatch(ctx context.Context, p CancelBatchParams) (CancelBatchResult, error) {
	var res CancelBatchResult
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sluice_batches WHERE id = ?`, p.BatchID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id FROM sluice_jobs WHERE batch_id = ? AND state = 'running' ORDER BY id`, p.BatchID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			res.Running = append(res.Running, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		now := micros(p.Now)
		if _, err := tx.ExecContext(ctx, `UPDATE sluice_batches SET cancel_requested_at = coalesce(cancel_requested_at, ?) WHERE id = ?`,
			now, p.BatchID); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, `UPDATE sluice_jobs SET state = 'canceled', lease_expires_at = NULL, finished_at = ?,
			updated_at = ? WHERE batch_id = ? AND state IN ('queued', 'running')`, now, now, p.BatchID)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		res.Canceled = int(n)
		return nil
	})
	if err != nil {
		return CancelBatchResult{}, fmt.Errorf("canceling batch %s: %w", p.BatchID, err)
	}
	return res, nil
}

func (s *sqliteStore) ListBatches(ctx context.Context, p ListBatchesParams) ([]*Batch, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	cursor, cmp, order := p.cursor()
	q := `SELECT id FROM sluice_batches WHERE (?1 = '' OR client = ?1) AND (?2 = '' OR upstream = ?2)`
	if cursor != "" {
		q += ` AND (created_at, id) ` + cmp + ` (SELECT created_at, id FROM sluice_batches WHERE id = ?3)`
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY created_at `+order+`, id `+order+` LIMIT ?4`, p.Client, p.Upstream, cursor, p.limit())
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	ids, err := scanBatchIDs(rows)
	if err != nil {
		return nil, err
	}
	return getBatches(ctx, s, p.newestFirst(ids))
}

func (s *sqliteStore) DeleteBatch(ctx context.Context, id string) error {
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var live int
		err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sluice_jobs WHERE batch_id = ?1 AND state IN ('queued', 'running'))
			FROM sluice_batches WHERE id = ?1`, id).Scan(&live)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if live > 0 {
			return fmt.Errorf("%w: %d of its jobs are still queued or running", ErrConflict, live)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM sluice_jobs WHERE batch_id = ?`, id); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM sluice_batches WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting batch %s: %w", id, err)
	}
	return nil
}
