package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// pgInsertGroup inserts the rows of parallel arrays. The MATERIALIZED CTE
// draws every id once, in input order; the final join tells which rows
// went in and which met an existing idempotency key.
const pgInsertGroup = `WITH u AS MATERIALIZED (
		SELECT nextval(pg_get_serial_sequence('sluice_jobs', 'id')) AS id, u.*
		FROM unnest($1::text[], $2::text[], $3::smallint[], $4::text[], $5::text[], $6::bytea[],
			$7::timestamptz[], $8::int[], $9::timestamptz[], $10::text[], $11::timestamptz[])
			WITH ORDINALITY AS u(k, up, pr, cl, pa, bo, dl, ma, av, wh, nw, ord)),
	ins AS (
		INSERT INTO sluice_jobs (id, idempotency_key, upstream, priority, client, path, body, deadline, max_attempts,
			state, available_at, webhook_url, created_at, updated_at)
		SELECT u.id, u.k, u.up, u.pr, u.cl, u.pa, u.bo, u.dl, u.ma, 'queued', u.av, u.wh, u.nw, u.nw
		FROM u ORDER BY u.ord
		ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, upstream),
	n AS (SELECT pg_notify('` + notifyChannel + `', d.up) FROM (SELECT DISTINCT upstream AS up FROM ins) d)
	SELECT u.ord, u.id, ins.id IS NOT NULL FROM u LEFT JOIN ins ON ins.id = u.id
		LEFT JOIN (SELECT count(*) FROM n) c ON true`

// pgFlushers is how many group-commit statements may be in flight at once
// per kind (inserts, completions).
const pgFlushers = 4

// flushInserts inserts a group of jobs in one round trip. Ids are drawn
// from the sequence in the statement, in input order, so each row's fate
// maps back to its caller by ordinality; rows whose idempotency key
// already existed are then read back.
func (s *postgresStore) flushInserts(ctx context.Context, items []InsertParams) ([]InsertResult, []error) {
	out := make([]InsertResult, len(items))
	errs := make([]error, len(items))
	fail := func(err error) ([]InsertResult, []error) {
		for i := range errs {
			errs[i] = fmt.Errorf("inserting job: %w", mapPgErr(err))
		}
		return out, errs
	}
	n := len(items)
	keys := make([]*string, n)
	ups, clients, paths, hooks := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios, maxes := make([]int16, n), make([]int32, n)
	bodies := make([][]byte, n)
	deadlines, avails, nows := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	for i, p := range items {
		if p.IdempotencyKey != "" {
			k := p.IdempotencyKey
			keys[i] = &k
		}
		ups[i], clients[i], paths[i], hooks[i] = p.Upstream, p.Client, p.Path, p.WebhookURL
		prios[i], maxes[i], bodies[i] = int16(p.Priority), int32(p.MaxAttempts), p.Body
		deadlines[i], avails[i], nows[i] = pgTime(p.Deadline), pgTime(p.AvailableAt), pgTime(p.Now)
	}
	rows, err := s.pool.Query(ctx, pgInsertGroup,
		keys, ups, prios, clients, paths, bodies, deadlines, maxes, avails, hooks, nows)
	if err != nil {
		return fail(err)
	}
	ids := make([]int64, n)
	inserted := make([]bool, n)
	for rows.Next() {
		var ord, id int64
		var ok bool
		if err := rows.Scan(&ord, &id, &ok); err != nil {
			rows.Close()
			return fail(err)
		}
		if ord < 1 || ord > int64(n) {
			rows.Close()
			return fail(fmt.Errorf("insert returned ordinality %d of %d", ord, n))
		}
		ids[ord-1], inserted[ord-1] = id, ok
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	signaled := map[string]bool{}
	for i, p := range items {
		if inserted[i] {
			out[i] = InsertResult{Job: &Job{ID: ids[i], IdempotencyKey: p.IdempotencyKey, Upstream: p.Upstream,
				Priority: p.Priority, Client: p.Client, Path: p.Path, Body: p.Body, Deadline: p.Deadline,
				MaxAttempts: p.MaxAttempts, State: StateQueued, AvailableAt: p.AvailableAt, WebhookURL: p.WebhookURL,
				CreatedAt: p.Now, UpdatedAt: p.Now}}
			if !signaled[p.Upstream] {
				signaled[p.Upstream] = true
				s.notes.signal(p.Upstream)
			}
			continue
		}
		j, err := scanPgJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE idempotency_key = $1`, p.IdempotencyKey))
		if err != nil {
			errs[i] = fmt.Errorf("inserting job: reading existing key: %w", mapPgErr(err))
			continue
		}
		out[i] = InsertResult{Job: j, Existing: true}
	}
	return out, errs
}

// flushCompletes completes a group of jobs in one fenced UPDATE … FROM
// unnest statement; the rows it did not touch are explained one by one
// (ErrLeaseLost or ErrNotFound).
func (s *postgresStore) flushCompletes(ctx context.Context, items []CompleteParams) ([]struct{}, []error) {
	out := make([]struct{}, len(items))
	errs := make([]error, len(items))
	n := len(items)
	ids, tokens := make([]int64, 0, n), make([]int64, 0, n)
	statuses := make([]int32, 0, n)
	headers := make([]string, 0, n)
	bodies := make([][]byte, 0, n)
	usage := [4][]int64{}
	nows := make([]time.Time, 0, n)
	seen := map[int64]bool{}
	var dups []int
	for i, p := range items {
		if seen[p.ID] {
			dups = append(dups, i) // the same job twice in one statement: do it alone afterwards
			continue
		}
		seen[p.ID] = true
		r := p.Result
		ids, tokens = append(ids, p.ID), append(tokens, p.Token)
		statuses, headers, bodies = append(statuses, int32(r.Status)), append(headers, string(encodeHeader(r.Header))), append(bodies, nonNil(r.Body))
		usage[0], usage[1] = append(usage[0], r.Usage.InputTokens), append(usage[1], r.Usage.OutputTokens)
		usage[2], usage[3] = append(usage[2], r.Usage.CacheCreationInputTokens), append(usage[3], r.Usage.CacheReadInputTokens)
		nows = append(nows, storeTime(p.Now))
	}
	rows, err := s.pool.Query(ctx, `UPDATE sluice_jobs j SET state = 'succeeded', attempts = j.attempts + 1,
		result_status = u.st, result_header = u.hd::jsonb, result_body = u.bo, usage_input = u.ui, usage_output = u.uo,
		usage_cache_creation = u.uc, usage_cache_read = u.ur, lease_expires_at = NULL, finished_at = u.nw, updated_at = u.nw
		FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::bytea[], $6::bigint[], $7::bigint[],
			$8::bigint[], $9::bigint[], $10::timestamptz[]) AS u(id, tk, st, hd, bo, ui, uo, uc, ur, nw)
		WHERE j.id = u.id AND j.lease_token = u.tk AND j.state = 'running'
		RETURNING j.id`, ids, tokens, statuses, headers, bodies, usage[0], usage[1], usage[2], usage[3], nows)
	done := map[int64]bool{}
	if err == nil {
		for rows.Next() {
			var id int64
			if err = rows.Scan(&id); err != nil {
				break
			}
			done[id] = true
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	isDup := map[int]bool{}
	for _, i := range dups {
		isDup[i] = true
	}
	for i, p := range items {
		switch {
		case isDup[i]:
			errs[i] = s.completeOne(ctx, p)
		case err != nil:
			errs[i] = mapPgErr(err)
		case !done[p.ID]:
			errs[i] = pgLeaseMiss(ctx, s.pool, p.ID)
		}
	}
	return out, errs
}
