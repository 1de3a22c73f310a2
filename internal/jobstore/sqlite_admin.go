package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

func (s *sqliteStore) Requeue(ctx context.Context, p RequeueParams) (int, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	now := micros(p.Now)
	where, args := []string{"state = 'dead'"}, []any{now, now}
	if len(p.IDs) > 0 {
		where = append(where, "id IN ("+placeholders(len(p.IDs))+")")
		for _, id := range p.IDs {
			args = append(args, id)
		}
	}
	if p.Upstream != "" {
		where = append(where, "upstream = ?")
		args = append(args, p.Upstream)
	}
	if p.BatchID != "" {
		where = append(where, "batch_id = ?")
		args = append(args, p.BatchID)
	}
	if p.Client != "" {
		where = append(where, "client = ?")
		args = append(args, p.Client)
	}
	var n int
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		// tx.Tx: the text varies with the id count, so it is not cached.
		rows, err := tx.Tx.QueryContext(ctx, `UPDATE sluice_jobs SET state = 'queued', attempts = 0, stalls = 0,
			available_at = ?, updated_at = ?, finished_at = NULL, result_status = NULL, result_header = NULL,
			result_body = NULL WHERE `+strings.Join(where, " AND ")+` RETURNING upstream`, args...)
		if err != nil {
			return err
		}
		ups, err := collectStrings(rows)
		if err != nil {
			return err
		}
		n = len(ups)
		*sig = append(*sig, distinct(ups)...)
		if n == 0 && len(p.IDs) == 1 {
			if err := sqliteLeaseMiss(ctx, tx, p.IDs[0]); errors.Is(err, ErrNotFound) {
				return err
			}
			return fmt.Errorf("%w: job %d is not dead", ErrConflict, p.IDs[0])
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	return n, nil
}

func collectStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func distinct(vs []string) []string {
	seen := map[string]struct{}{}
	var out []string
	for _, v := range vs {
		if _, ok := seen[v]; !ok {
			seen[v] = struct{}{}
			out = append(out, v)
		}
	}
	return out
}

// historyEntry is the JSON of a rescuer's entry in a job's error history.
func historyEntry(msg string, now time.Time) string {
	return string(encodeAttemptError(AttemptError{Kind: llm.Transient.String(), Message: msg, At: storeTime(now)}))
}

func (s *sqliteStore) Rescue(ctx context.Context, p RescueParams) (RescueResult, error) {
	limit := cmpOr(p.Limit, RescueLimitDefault)
	now := micros(p.Now)
	var res RescueResult
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		rows, err := tx.QueryContext(ctx, `UPDATE sluice_jobs SET
			state = CASE WHEN stalls + 1 > ? THEN 'dead' ELSE 'queued' END,
			finished_at = CASE WHEN stalls + 1 > ? THEN ? ELSE NULL END,
			stalls = stalls + 1, available_at = ?, updated_at = ?, lease_expires_at = NULL,
			errors = json_insert(errors, '$[#]', json_set(json(?), '$.attempt', attempts + 1))
			WHERE id IN (SELECT id FROM sluice_jobs WHERE state = 'running' AND lease_expires_at <= ?
				ORDER BY lease_expires_at LIMIT ?)
			RETURNING state, upstream`,
			p.MaxStalls, p.MaxStalls, now, now, now, historyEntry(stallMessage, p.Now), now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var state, upstream string
			if err := rows.Scan(&state, &upstream); err != nil {
				return err
			}
			if State(state) == StateDead {
				res.Dead++
			} else {
				res.Requeued++
				*sig = append(*sig, upstream)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, `UPDATE sluice_jobs SET state = 'dead', finished_at = ?, updated_at = ?,
			errors = json_insert(errors, '$[#]', json_set(json(?), '$.attempt', attempts + 1))
			WHERE id IN (SELECT id FROM sluice_jobs WHERE state = 'queued' AND deadline IS NOT NULL AND deadline <= ? LIMIT ?)`,
			now, now, historyEntry(deadlineMessage, p.Now), now, limit)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		res.Expired = int(n)
		*sig = distinct(*sig)
		return nil
	})
	if err != nil {
		return RescueResult{}, fmt.Errorf("rescuing jobs: %w", err)
	}
	return res, nil
}

func (s *sqliteStore) DeleteFinished(ctx context.Context, p DeleteFinishedParams) (int, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("deleting finished jobs: %w", err)
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM sluice_jobs WHERE id IN (SELECT id FROM sluice_jobs
			WHERE state = ? AND finished_at IS NOT NULL AND finished_at < ?
				AND NOT EXISTS (SELECT 1 FROM sluice_webhook_deliveries wd WHERE wd.job_id = sluice_jobs.id AND wd.state = 'pending')
				AND (batch_id IS NULL OR (batch_id NOT IN (SELECT id FROM sluice_batches WHERE keep_until > ?)
					AND batch_id NOT IN (SELECT batch_id FROM sluice_webhook_deliveries WHERE batch_id <> '' AND state = 'pending')))
			LIMIT ?)`,
			string(p.State), micros(p.Before), micros(p.Now), cmpOr(p.Limit, RescueLimitDefault))
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		_, err = tx.ExecContext(ctx, `DELETE FROM sluice_batches WHERE created_at < ? AND (keep_until IS NULL OR keep_until <= ?)
			AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE j.batch_id = sluice_batches.id)
			AND NOT EXISTS (SELECT 1 FROM sluice_webhook_deliveries wd WHERE wd.batch_id = sluice_batches.id AND wd.state = 'pending')`,
			micros(p.Before), micros(p.Now))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting finished jobs: %w", err)
	}
	return int(n), nil
}

func (s *sqliteStore) SetPaused(ctx context.Context, p PauseParams) error {
	if p.Upstream == "" {
		return fmt.Errorf("pausing upstream: %w", invalid("Upstream", "required"))
	}
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		if p.Paused {
			_, err := tx.ExecContext(ctx, `INSERT INTO sluice_paused_upstreams (upstream, paused_at) VALUES (?, ?)
				ON CONFLICT (upstream) DO NOTHING`, p.Upstream, micros(p.Now))
			return err
		}
		*sig = append(*sig, p.Upstream)
		_, err := tx.ExecContext(ctx, `DELETE FROM sluice_paused_upstreams WHERE upstream = ?`, p.Upstream)
		return err
	})
	if err != nil {
		return fmt.Errorf("pausing upstream %s: %w", p.Upstream, err)
	}
	return nil
}

func (s *sqliteStore) PausedUpstreams(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT upstream FROM sluice_paused_upstreams ORDER BY upstream`)
	if err != nil {
		return nil, fmt.Errorf("listing paused upstreams: %w", err)
	}
	out, err := collectStrings(rows)
	if err != nil {
		return nil, fmt.Errorf("listing paused upstreams: %w", err)
	}
	return out, nil
}

func (s *sqliteStore) NextAvailable(ctx context.Context, upstream string) (time.Time, bool, error) {
	q, args := `SELECT min(available_at) FROM sluice_jobs WHERE state = 'queued'`, []any{}
	if upstream != "" {
		q += ` AND upstream = ?`
		args = append(args, upstream)
	}
	var at sql.NullInt64
	if err := s.r.QueryRowContext(ctx, q, args...).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("finding next available job: %w", err)
	}
	return fromMicros(at), at.Valid, nil
}

// sqliteCountLive counts live jobs on the partial indexes of queued jobs
// (sluice_jobs_available holds upstream and available_at, so the table is
// never read) and of running ones.
const sqliteCountLive = `SELECT upstream, sum(queued), sum(delayed), sum(running) FROM (
		SELECT upstream, count(*) AS queued, count(*) FILTER (WHERE available_at > ?) AS delayed, 0 AS running
			FROM sluice_jobs WHERE state = 'queued' GROUP BY upstream
		UNION ALL
		SELECT upstream, 0, 0, count(*) FROM sluice_jobs WHERE state = 'running' GROUP BY upstream)
	GROUP BY upstream ORDER BY upstream`

func (s *sqliteStore) CountLive(ctx context.Context, now time.Time) ([]LiveCount, error) {
	rows, err := s.r.QueryContext(ctx, sqliteCountLive, micros(now))
	if err != nil {
		return nil, fmt.Errorf("counting live jobs: %w", err)
	}
	defer rows.Close()
	var out []LiveCount
	for rows.Next() {
		var c LiveCount
		if err := rows.Scan(&c.Upstream, &c.Queued, &c.Delayed, &c.Running); err != nil {
			return nil, fmt.Errorf("counting live jobs: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting live jobs: %w", err)
	}
	return out, nil
}

// sqliteBacklog counts, per priority class, up to a limit of available
// queued jobs of an upstream: one bounded range scan of the claim index
// per class; nothing for a paused upstream.
var sqliteBacklog = func() string {
	parts := make([]string, llm.NumPriorities)
	for p := range parts {
		parts[p] = fmt.Sprintf(`SELECT %d, (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs INDEXED BY sluice_jobs_claim_upstream
			WHERE state = 'queued' AND upstream = ?1 AND priority = %d AND available_at <= ?2
			AND (deadline IS NULL OR deadline > ?2) LIMIT ?3))`, p, p)
	}
	return `SELECT * FROM (` + strings.Join(parts, " UNION ALL ") + `) WHERE NOT EXISTS (SELECT 1 FROM sluice_paused_upstreams WHERE upstream = ?1)`
}()

func (s *sqliteStore) Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error) {
	var out [llm.NumPriorities]int
	rows, err := s.r.QueryContext(ctx, sqliteBacklog, upstream, micros(now), max(limit, 1))
	if err != nil {
		return out, fmt.Errorf("counting the backlog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p, n int
		if err := rows.Scan(&p, &n); err != nil {
			return out, fmt.Errorf("counting the backlog: %w", err)
		}
		out[p] = n
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("counting the backlog: %w", err)
	}
	return out, nil
}
