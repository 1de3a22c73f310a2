package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sqliteRunLive selects a run's live jobs (?1 the run, ?2 the client or
// "" for every client's).
const sqliteRunLive = `FROM sluice_jobs WHERE run_id = ?1 AND (?2 = '' OR client = ?2) AND state IN ('queued', 'running')`

func (s *sqliteStore) CancelRun(ctx context.Context, p CancelRunParams) (CancelRunResult, error) {
	if err := p.validate(); err != nil {
		return CancelRunResult{}, fmt.Errorf("canceling run: %w", err)
	}
	res := CancelRunResult{Canceled: map[string]int{}}
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sluice_jobs WHERE run_id = ?1 AND (?2 = '' OR client = ?2) LIMIT 1`,
			p.RunID, p.Client).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, upstream, state `+sqliteRunLive+` ORDER BY id`, p.RunID, p.Client)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var upstream, state string
			if err := rows.Scan(&id, &upstream, &state); err != nil {
				return err
			}
			res.Canceled[upstream]++
			if State(state) == StateRunning {
				res.Running = append(res.Running, id)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		now := micros(p.Now)
		_, err = tx.ExecContext(ctx, `UPDATE sluice_jobs SET state = 'canceled', lease_expires_at = NULL, finished_at = ?3,
			updated_at = ?3 WHERE id IN (SELECT id `+sqliteRunLive+`)`, p.RunID, p.Client, now)
		return err
	})
	if err != nil {
		return CancelRunResult{}, fmt.Errorf("canceling run %s: %w", p.RunID, err)
	}
	return res, nil
}
