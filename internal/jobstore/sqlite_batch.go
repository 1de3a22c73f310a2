package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

func (s *sqliteStore) CreateBatch(ctx context.Context, p CreateBatchParams) (*Batch, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating batch: %w", err)
	}
	id := p.ID
	now := storeTime(p.Now)
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_batches (id, format, total, created_at, client) VALUES (?, ?, ?, ?, ?)`,
			id, string(p.Format), len(p.Jobs), micros(now), p.Client); err != nil {
			return mapSQLiteErr(err)
		}
		stmt, err := tx.PrepareContext(ctx, sqliteInsert)
		if err != nil {
			return err
		}
		defer stmt.Close()
		var ups []string
		for _, j := range p.Jobs {
			j = j.normalized()
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
	return &Batch{ID: id, Format: p.Format, Client: p.Client, Total: len(p.Jobs), Counts: BatchCounts{Queued: len(p.Jobs)}, CreatedAt: now}, nil
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
	var created sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT format, total, created_at, client FROM sluice_batches WHERE id = ?`, id).Scan(&format, &b.Total, &created, &b.Client)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("getting batch %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting batch %s: %w", id, err)
	}
	b.Format, b.CreatedAt = providerProtocol(format), fromMicros(created)
	rows, err := tx.QueryContext(ctx, `SELECT state, count(*) FROM sluice_jobs WHERE batch_id = ? GROUP BY state`, id)
	if err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("counting batch %s: %w", id, err)
		}
		b.Counts.add(State(st), n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
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
