package jobstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

func (s *postgresStore) CancelRun(ctx context.Context, p CancelRunParams) (CancelRunResult, error) {
	if err := p.validate(); err != nil {
		return CancelRunResult{}, fmt.Errorf("canceling run: %w", err)
	}
	res := CancelRunResult{Canceled: map[string]int{}}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE sluice_jobs j SET state = 'canceled', lease_expires_at = NULL,
			finished_at = $1, updated_at = $1
			FROM (SELECT id, state FROM sluice_jobs WHERE run_id = $2 AND ($3::text = '' OR client = $3)
				AND state IN ('queued', 'running') FOR UPDATE) old
			WHERE j.id = old.id RETURNING j.id, j.upstream, old.state`, pgTime(p.Now), p.RunID, p.Client)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var upstream, prev string
			if err := rows.Scan(&id, &upstream, &prev); err != nil {
				return err
			}
			res.Canceled[upstream]++
			if State(prev) == StateRunning {
				res.Running = append(res.Running, id)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(res.Canceled) > 0 {
			return nil
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sluice_jobs WHERE run_id = $1 AND ($2::text = '' OR client = $2))`,
			p.RunID, p.Client).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return CancelRunResult{}, fmt.Errorf("canceling run %s: %w", p.RunID, err)
	}
	slicesSort(res.Running)
	return res, nil
}
