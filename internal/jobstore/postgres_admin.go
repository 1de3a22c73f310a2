package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sluicehq/sluice/internal/llm"
)

// pgInBatch matches the jobs of one batch ($? is its id), through the
// membership table's primary key.
const pgInBatch = `id = ANY(ARRAY(SELECT job_id FROM sluice_batch_jobs WHERE batch_id = $?))`

// pgJobColumnsOf is jobColumns qualified with a table alias.
func pgJobColumnsOf(alias string) string {
	cols := strings.Split(jobColumns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func (s *postgresStore) Requeue(ctx context.Context, p RequeueParams) (int, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	w := pgWhere{conds: []string{"state = 'dead'"}, args: []any{pgTime(p.Now)}} // $1 is now
	if len(p.IDs) > 0 {
		w.add("id = ANY($?)", p.IDs)
	}
	w.addIf("upstream", p.Upstream)
	if p.BatchID != "" {
		w.add(pgInBatch, p.BatchID)
	}
	w.addIf("client", p.Client)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `UPDATE sluice_jobs SET state = 'queued', attempts = 0, stalls = 0,
		available_at = $1, updated_at = $1, finished_at = NULL, result_status = NULL, result_header = NULL,
		result_body = NULL WHERE `+w.String()+` RETURNING upstream`, w.args...)
	if err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	ups, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	if len(ups) == 0 && len(p.IDs) == 1 {
		if err := pgLeaseMiss(ctx, tx, p.IDs[0]); errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("requeueing job %d: %w", p.IDs[0], err)
		}
		return 0, fmt.Errorf("requeueing job %d: %w: job is not dead", p.IDs[0], ErrConflict)
	}
	if err := s.notifyTx(ctx, tx, distinct(ups)); err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("requeueing jobs: %w", err)
	}
	for _, u := range distinct(ups) {
		s.notes.signal(u)
	}
	return len(ups), nil
}

// notifyTx sends a NOTIFY per upstream when tx commits.
func (s *postgresStore) notifyTx(ctx context.Context, tx pgx.Tx, upstreams []string) error {
	if len(upstreams) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_notify('`+notifyChannel+`', u) FROM unnest($1::text[]) AS u`, upstreams)
	return err
}

func (s *postgresStore) Rescue(ctx context.Context, p RescueParams) (RescueResult, error) {
	limit := cmpOr(p.Limit, RescueLimitDefault)
	now := pgTime(p.Now)
	var res RescueResult
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("rescuing jobs: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `UPDATE sluice_jobs SET
		state = CASE WHEN stalls + 1 > $1 THEN 'dead' ELSE 'queued' END,
		finished_at = CASE WHEN stalls + 1 > $1 THEN $2 ELSE NULL END,
		stalls = stalls + 1, available_at = $2, updated_at = $2, lease_expires_at = NULL,
		errors = errors || jsonb_build_array(jsonb_set($3::jsonb, '{attempt}', to_jsonb(attempts + 1)))
		WHERE id = ANY(ARRAY(SELECT id FROM sluice_jobs WHERE state = 'running' AND lease_expires_at <= $2
			ORDER BY lease_expires_at LIMIT $4 FOR UPDATE SKIP LOCKED))
		RETURNING state, upstream`, p.MaxStalls, now, historyEntry(stallMessage, p.Now), limit)
	if err != nil {
		return res, fmt.Errorf("rescuing jobs: %w", err)
	}
	var ups []string
	for rows.Next() {
		var state, upstream string
		if err := rows.Scan(&state, &upstream); err != nil {
			rows.Close()
			return res, fmt.Errorf("rescuing jobs: %w", err)
		}
		if State(state) == StateDead {
			res.Dead++
		} else {
			res.Requeued++
			ups = append(ups, upstream)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("rescuing jobs: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE sluice_jobs SET state = 'dead', finished_at = $1, updated_at = $1,
		errors = errors || jsonb_build_array(jsonb_set($2::jsonb, '{attempt}', to_jsonb(attempts + 1)))
		WHERE id = ANY(ARRAY(SELECT id FROM sluice_jobs WHERE state = 'queued' AND deadline IS NOT NULL AND deadline <= $1
			LIMIT $3 FOR UPDATE SKIP LOCKED))`, now, historyEntry(deadlineMessage, p.Now), limit)
	if err != nil {
		return res, fmt.Errorf("rescuing jobs: %w", err)
	}
	res.Expired = int(tag.RowsAffected())
	ups = distinct(ups)
	if err := s.notifyTx(ctx, tx, ups); err != nil {
		return RescueResult{}, fmt.Errorf("rescuing jobs: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return RescueResult{}, fmt.Errorf("rescuing jobs: %w", err)
	}
	for _, u := range ups {
		s.notes.signal(u)
	}
	return res, nil
}

func (s *postgresStore) DeleteFinished(ctx context.Context, p DeleteFinishedParams) (int, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("deleting finished jobs: %w", err)
	}
	// = ANY(ARRAY(…)) probes the primary key; IN (…) may scan the table
	// (see pgClaim).
	// Batch jobs leave their batch's membership in the same statement.
	var n int
	err := s.pool.QueryRow(ctx, `WITH d AS (DELETE FROM sluice_jobs WHERE id = ANY(ARRAY(SELECT id FROM sluice_jobs
			WHERE state = $1 AND finished_at IS NOT NULL AND finished_at < $2
				AND NOT EXISTS (SELECT 1 FROM sluice_webhook_deliveries wd WHERE wd.job_id = sluice_jobs.id AND wd.state = 'pending')
				AND (batch_id IS NULL OR (batch_id NOT IN (SELECT id FROM sluice_batches WHERE keep_until > coalesce($4::timestamptz, '-infinity'::timestamptz))
					AND batch_id NOT IN (SELECT batch_id FROM sluice_webhook_deliveries WHERE batch_id <> '' AND state = 'pending')))
			LIMIT $3))
			RETURNING batch_id, custom_id),
		m AS (DELETE FROM sluice_batch_jobs b USING d WHERE b.batch_id = d.batch_id AND b.custom_id = d.custom_id)
		SELECT count(*) FROM d`,
		string(p.State), pgTime(p.Before), cmpOr(p.Limit, RescueLimitDefault), pgTime(p.Now)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("deleting finished jobs: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM sluice_batches b WHERE created_at < $1
		AND (keep_until IS NULL OR keep_until <= coalesce($2::timestamptz, '-infinity'::timestamptz))
		AND NOT EXISTS (SELECT 1 FROM sluice_batch_jobs m WHERE m.batch_id = b.id)
		AND NOT EXISTS (SELECT 1 FROM sluice_webhook_deliveries wd WHERE wd.batch_id = b.id AND wd.state = 'pending')`,
		pgTime(p.Before), pgTime(p.Now)); err != nil {
		return 0, fmt.Errorf("deleting finished batches: %w", err)
	}
	return n, nil
}

func (s *postgresStore) SetPaused(ctx context.Context, p PauseParams) error {
	if p.Upstream == "" {
		return fmt.Errorf("pausing upstream: %w", invalid("Upstream", "required"))
	}
	var err error
	if p.Paused {
		_, err = s.pool.Exec(ctx, `INSERT INTO sluice_paused_upstreams (upstream, paused_at) VALUES ($1, $2)
			ON CONFLICT (upstream) DO NOTHING`, p.Upstream, pgTime(p.Now))
	} else {
		_, err = s.pool.Exec(ctx, `WITH d AS (DELETE FROM sluice_paused_upstreams WHERE upstream = $1)
			SELECT pg_notify('`+notifyChannel+`', $1)`, p.Upstream)
		s.notes.signal(p.Upstream)
	}
	if err != nil {
		return fmt.Errorf("pausing upstream %s: %w", p.Upstream, err)
	}
	return nil
}

func (s *postgresStore) PausedUpstreams(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT upstream FROM sluice_paused_upstreams ORDER BY upstream`)
	if err != nil {
		return nil, fmt.Errorf("listing paused upstreams: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing paused upstreams: %w", err)
	}
	return out, nil
}

// pgNextAvailable finds the earliest queued job with one index probe per
// priority class, on the claim indexes (priority comes before available_at
// in both, so a single min() would read every queued row).
const pgNextAvailable = `SELECT min((SELECT available_at FROM sluice_jobs WHERE state = 'queued' AND priority = p %s
	ORDER BY available_at LIMIT 1)) FROM generate_series(0, %d) AS p`

var (
	pgNextAvailableAny      = fmt.Sprintf(pgNextAvailable, "", llm.NumPriorities-1)
	pgNextAvailableUpstream = fmt.Sprintf(pgNextAvailable, "AND upstream = $1", llm.NumPriorities-1)
)

func (s *postgresStore) NextAvailable(ctx context.Context, upstream string) (time.Time, bool, error) {
	q, args := pgNextAvailableAny, []any{}
	if upstream != "" {
		q, args = pgNextAvailableUpstream, []any{upstream}
	}
	at := pgTime(time.Time{})
	if err := s.pool.QueryRow(ctx, q, args...).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("finding next available job: %w", err)
	}
	return fromPgTime(at), at.Valid, nil
}

func (s *postgresStore) CreateBatch(ctx context.Context, p CreateBatchParams) (*Batch, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating batch: %w", err)
	}
	id := p.ID
	now := storeTime(p.Now)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_batches (id, format, total, created_at, client, upstream, attrs, keep_until)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			id, string(p.Format), len(p.Jobs), pgTime(now), p.Client, p.Upstream, p.Attrs, pgTime(p.KeepUntil)); err != nil {
			return mapPgErr(err)
		}
		if p.WebhookURL != "" {
			// Before the jobs: the trigger of a batch with none open reads the
			// batch.
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_batch_webhooks (batch_id, webhook_url, open_jobs) VALUES ($1, $2, $3)`,
				id, p.WebhookURL, p.openJobs()); err != nil {
				return mapPgErr(err)
			}
		}
		// Draw the ids first: the membership rows name them.
		ids := make([]int64, 0, len(p.Jobs))
		idRows, err := tx.Query(ctx, `SELECT nextval(pg_get_serial_sequence('sluice_jobs', 'id')) FROM generate_series(1, $1)`, len(p.Jobs))
		if err != nil {
			return err
		}
		if ids, err = pgx.AppendRows(ids, idRows, pgx.RowTo[int64]); err != nil {
			return err
		}
		rows := make([][]any, len(p.Jobs))
		members := make([][]any, len(p.Jobs))
		var ups []string
		for i, j := range p.Jobs {
			j = j.normalized()
			a := pgInsertArgs(j, id)
			// CopyFrom takes the column values without the literal state.
			rows[i] = append(append(append(append([]any{ids[i]}, a[:8]...), "queued"), a[8:]...), pgDeadArgs(j)...)
			if j.Dead != nil {
				rows[i][9] = "dead"
			} else {
				ups = append(ups, j.Upstream)
			}
			members[i] = []any{id, j.CustomID, ids[i]}
		}
		cols := []string{"id", "idempotency_key", "upstream", "priority", "client", "path", "body", "deadline", "max_attempts",
			"state", "available_at", "batch_id", "custom_id", "webhook_url", "created_at", "updated_at",
			"errors", "result_status", "result_header", "result_body", "finished_at"}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"sluice_jobs"}, cols, pgx.CopyFromRows(rows)); err != nil {
			return mapPgErr(err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"sluice_batch_jobs"}, []string{"batch_id", "custom_id", "job_id"},
			pgx.CopyFromRows(members)); err != nil {
			return mapPgErr(err)
		}
		return s.notifyTx(ctx, tx, distinct(ups))
	})
	if err != nil {
		return nil, fmt.Errorf("creating batch: %w", err)
	}
	s.notes.signal("")
	return newBatch(p, now), nil
}

// pgDeadArgs are the columns a batch's job inserted dead (InsertParams.Dead)
// fills, after pgInsertArgs: its errors, its kept error answer and its
// finish (nothing for a queued job).
func pgDeadArgs(p InsertParams) []any {
	if p.Dead == nil {
		return []any{"[]", nil, nil, nil, pgTime(time.Time{})}
	}
	args := []any{"[" + string(encodeAttemptError(p.deadError())) + "]", nil, nil, nil, pgTime(p.Now)}
	if r := p.DeadResult; r != nil {
		args[1], args[2], args[3] = int32(r.Status), string(encodeHeader(r.Header)), nonNil(r.Body)
	}
	return args
}

func (s *postgresStore) GetBatch(ctx context.Context, id string) (*Batch, error) {
	b := &Batch{ID: id}
	var format string
	created, cancel, keep := pgTime(time.Time{}), pgTime(time.Time{}), pgTime(time.Time{})
	err := s.pool.QueryRow(ctx, `SELECT format, total, created_at, client, upstream, attrs, cancel_requested_at, keep_until,
		coalesce((SELECT webhook_url FROM sluice_batch_webhooks w WHERE w.batch_id = b.id), '')
		FROM sluice_batches b WHERE id = $1`, id).Scan(&format, &b.Total, &created, &b.Client, &b.Upstream, &b.Attrs, &cancel, &keep, &b.WebhookURL)
	if err != nil {
		return nil, fmt.Errorf("getting batch %s: %w", id, mapPgErr(err))
	}
	b.Format, b.CreatedAt = providerProtocol(format), fromPgTime(created)
	b.CancelRequestedAt, b.KeepUntil = fromPgTime(cancel), fromPgTime(keep)
	rows, err := s.pool.Query(ctx, `SELECT j.state, count(*), max(j.finished_at) FROM sluice_batch_jobs b JOIN sluice_jobs j ON j.id = b.job_id
		WHERE b.batch_id = $1 GROUP BY j.state`, id)
	if err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
	defer rows.Close()
	var last time.Time
	for rows.Next() {
		var st string
		var n int64
		finished := pgTime(time.Time{})
		if err := rows.Scan(&st, &n, &finished); err != nil {
			return nil, fmt.Errorf("counting batch %s: %w", id, err)
		}
		b.Counts.add(State(st), int(n))
		if f := fromPgTime(finished); f.After(last) {
			last = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", id, err)
	}
	b.setEnded(last)
	return b, nil
}

func (s *postgresStore) BatchJobs(ctx context.Context, p BatchJobsParams) (BatchPage, error) {
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1 FROM sluice_batches WHERE id = $1`, p.BatchID).Scan(&one); err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, mapPgErr(err))
	}
	limit := pageLimit(p.Limit)
	rows, err := s.pool.Query(ctx, `SELECT `+pgJobColumnsOf("j")+` FROM sluice_batch_jobs b JOIN sluice_jobs j ON j.id = b.job_id
		WHERE b.batch_id = $1 AND b.custom_id > $2 ORDER BY b.custom_id LIMIT $3`, p.BatchID, p.After, limit+1)
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, err)
	}
	jobs, err := collectPgJobs(rows)
	if err != nil {
		return BatchPage{}, fmt.Errorf("listing batch %s: %w", p.BatchID, err)
	}
	return batchPage(jobs, limit), nil
}

func (s *postgresStore) CancelBatch(ctx context.Context, p CancelBatchParams) (CancelBatchResult, error) {
	var res CancelBatchResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `UPDATE sluice_batches SET cancel_requested_at = coalesce(cancel_requested_at, $2)
			WHERE id = $1 RETURNING 1`, p.BatchID, pgTime(p.Now)).Scan(&one); err != nil {
			return mapPgErr(err)
		}
		rows, err := tx.Query(ctx, `UPDATE sluice_jobs j SET state = 'canceled', lease_expires_at = NULL,
			finished_at = $1, updated_at = $1
			FROM (SELECT id, state FROM sluice_jobs WHERE `+strings.ReplaceAll(pgInBatch, "$?", "$2")+`
				AND state IN ('queued', 'running') FOR UPDATE) old
			WHERE j.id = old.id RETURNING j.id, old.state`, pgTime(p.Now), p.BatchID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var prev string
			if err := rows.Scan(&id, &prev); err != nil {
				return err
			}
			res.Canceled++
			if State(prev) == StateRunning {
				res.Running = append(res.Running, id)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return CancelBatchResult{}, fmt.Errorf("canceling batch %s: %w", p.BatchID, err)
	}
	slicesSort(res.Running)
	return res, nil
}

// pgCountLive counts live jobs with an index-only scan of the partial claim
// index (upstream, priority, available_at, id) WHERE state = 'queued', and
// the lease index for running jobs: its predicate needs lease_expires_at IS
// NOT NULL, which every running job has (without it, the running count was
// a sequential scan of the whole table).
const pgCountLive = `SELECT upstream, sum(queued)::bigint, sum(delayed)::bigint, sum(running)::bigint FROM (
		SELECT upstream, count(*) AS queued, count(*) FILTER (WHERE available_at > $1) AS delayed, 0 AS running
			FROM sluice_jobs WHERE state = 'queued' GROUP BY upstream
		UNION ALL
		SELECT upstream, 0, 0, count(*) FROM sluice_jobs
			WHERE state = 'running' AND lease_expires_at IS NOT NULL GROUP BY upstream) c
	GROUP BY upstream ORDER BY upstream`

func (s *postgresStore) CountLive(ctx context.Context, now time.Time) ([]LiveCount, error) {
	var out []LiveCount
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// One backend: on a deep queue a parallel plan took three
		// processes and longer than a serial scan (BENCHMARKS.md, "Tuning
		// notes").
		if _, err := tx.Exec(ctx, `SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pgCountLive, pgTime(now))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c LiveCount
			if err := rows.Scan(&c.Upstream, &c.Queued, &c.Delayed, &c.Running); err != nil {
				return err
			}
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("counting live jobs: %w", err)
	}
	return out, nil
}

// pgBacklog counts, per priority class, up to $3 available queued jobs of
// an upstream: one bounded range scan of the claim index per class
// (upstream, priority, available_at), skipping jobs past their deadline as
// Claim does; nothing for a paused upstream.
const pgBacklog = `SELECT p, (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE state = 'queued' AND upstream = $1
		AND priority = p AND available_at <= $2
		AND (deadline IS NULL OR deadline > $2) LIMIT $3) AS b)
	FROM generate_series(0, %d) AS p
	WHERE NOT EXISTS (SELECT 1 FROM sluice_paused_upstreams WHERE upstream = $1)`

var pgBacklogQuery = fmt.Sprintf(pgBacklog, llm.NumPriorities-1)

func (s *postgresStore) Backlog(ctx context.Context, upstream string, now time.Time, limit int) ([llm.NumPriorities]int, error) {
	var out [llm.NumPriorities]int
	rows, err := s.pool.Query(ctx, pgBacklogQuery, upstream, pgTime(now), max(limit, 1))
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

func (s *postgresStore) ListBatches(ctx context.Context, p ListBatchesParams) ([]*Batch, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	cursor, cmp, order := p.cursor()
	q := `SELECT id FROM sluice_batches WHERE ($1 = '' OR client = $1) AND ($2 = '' OR upstream = $2)`
	if cursor != "" {
		q += ` AND (created_at, id) ` + cmp + ` (SELECT created_at, id FROM sluice_batches WHERE id = $4)`
	} else {
		q += ` AND $4 = ''`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at `+order+`, id `+order+` LIMIT $3`, p.Client, p.Upstream, p.limit(), cursor)
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	return getBatches(ctx, s, p.newestFirst(ids))
}

func (s *postgresStore) DeleteBatch(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var live int64
		err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM sluice_batch_jobs m JOIN sluice_jobs j ON j.id = m.job_id
			WHERE m.batch_id = b.id AND j.state IN ('queued', 'running')) FROM sluice_batches b WHERE b.id = $1 FOR UPDATE`, id).Scan(&live)
		if err != nil {
			return mapPgErr(err)
		}
		if live > 0 {
			return fmt.Errorf("%w: %d of its jobs are still queued or running", ErrConflict, live)
		}
		if _, err := tx.Exec(ctx, `WITH m AS (DELETE FROM sluice_batch_jobs WHERE batch_id = $1 RETURNING job_id)
			DELETE FROM sluice_jobs WHERE id IN (SELECT job_id FROM m)`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM sluice_batches WHERE id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("deleting batch %s: %w", id, err)
	}
	return nil
}
