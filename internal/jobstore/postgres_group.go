package jobstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// pgInsertGroup inserts the rows of parallel arrays. The MATERIALIZED CTE
// draws every id once, in input order, and decides which rows start leased
// to a local worker (ow: the Handoff's owner, set when one took the row;
// leased unless its upstream is paused: the paused upstreams are read once
// per statement into an array, where a NOT EXISTS per row became a hashed
// subplan that built a hash table on every execution); the final join
// tells which rows went in,
// leased or queued, and which met an existing idempotency key. $12 lists
// the upstreams to NOTIFY; the notify CTE is referenced from the select
// list, because PostgreSQL skips a CTE nothing reads (an earlier LEFT JOIN
// on it was planned away, so other nodes were never notified of inserts).
const pgInsertGroup = `WITH u AS MATERIALIZED (
		SELECT nextval(pg_get_serial_sequence('sluice_jobs', 'id')) AS id, u.*,
			u.ow IS NOT NULL AND u.up <> ALL (ARRAY(SELECT upstream FROM sluice_paused_upstreams)) AS leased
		FROM unnest($1::text[], $2::text[], $3::smallint[], $4::text[], $5::text[], $6::bytea[],
			$7::timestamptz[], $8::int[], $9::timestamptz[], $10::text[], $11::timestamptz[], $13::text[], $14::timestamptz[],
			$15::text[], $16::text[])
			WITH ORDINALITY AS u(k, up, pr, cl, pa, bo, dl, ma, av, wh, nw, ow, ex, cu, ru, ord)),
	ins AS (
		INSERT INTO sluice_jobs (id, idempotency_key, upstream, priority, client, path, body, deadline, max_attempts,
			state, available_at, webhook_url, created_at, updated_at, lease_token, lease_owner, lease_expires_at,
			custom_id, run_id)
		SELECT u.id, u.k, u.up, u.pr, u.cl, u.pa, u.bo, u.dl, u.ma, CASE WHEN u.leased THEN 'running' ELSE 'queued' END,
			u.av, u.wh, u.nw, u.nw, CASE WHEN u.leased THEN 1 ELSE 0 END, CASE WHEN u.leased THEN u.ow ELSE '' END,
			CASE WHEN u.leased THEN u.ex END, u.cu, u.ru
		FROM u ORDER BY u.ord
		ON CONFLICT (client, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id),
	n AS (SELECT pg_notify('` + notifyChannel + `', x) FROM unnest($12::text[]) x)
	SELECT u.ord, u.id, ins.id IS NOT NULL, u.leased, (SELECT count(*) FROM n) FROM u LEFT JOIN ins ON ins.id = u.id`

// pgFlushers is how many group-commit statements of one kind (inserts,
// completions) may be in flight at once; pgInsertParallelMin and
// pgCompleteParallelMin are how many calls must wait before a second one
// starts beside a running one. One statement at a time under a trickle
// gives the biggest batches; but with inserts one statement at a time,
// single submitters all wait for each other's commit, so a second insert
// starts once 8 wait. Completions keep 64: a flood of them still fills
// several. The measurements behind the three numbers: BENCHMARKS.md,
// "Tuning notes".
const (
	pgFlushers            = 4
	pgInsertParallelMin   = 8
	pgCompleteParallelMin = 64
)

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
	owners, expires := make([]*string, n), make([]pgtype.Timestamptz, n)
	customs, runs := make([]*string, n), make([]*string, n)
	takers := make([]*Handoff, n)
	var queuedUps []string
	for i, p := range items {
		if h := s.handoffFor(p); h != nil {
			takers[i], owners[i], expires[i] = h, &h.owner, pgTime(p.Now.Add(h.leaseFor))
		} else {
			queuedUps = append(queuedUps, p.Upstream)
		}
		if p.IdempotencyKey != "" {
			k := p.IdempotencyKey
			keys[i] = &k
		}
		customs[i], runs[i] = textOrNil(p.CustomID), textOrNil(p.RunID)
		ups[i], clients[i], paths[i], hooks[i] = p.Upstream, p.Client, p.Path, p.WebhookURL
		prios[i], maxes[i], bodies[i] = int16(p.Priority), int32(p.MaxAttempts), p.Body
		deadlines[i], avails[i], nows[i] = pgTime(p.Deadline), pgTime(p.AvailableAt), pgTime(p.Now)
	}
	// Upstreams whose every row was handed off need no NOTIFY.
	due, late := s.notifyDue(queuedUps)
	ids := make([]int64, n)
	inserted, leased := make([]bool, n), make([]bool, n)
	var err error
	if !slices.ContainsFunc(keys, func(k *string) bool { return k != nil }) {
		// No idempotency keys: the lean statement, which executes faster.
		err = s.queryInsertPlain(ctx, ids, inserted, leased,
			ups, prios, clients, paths, bodies, deadlines, maxes, avails, hooks, nows, due, owners, expires, customs, runs)
	} else {
		err = s.queryInsertGroup(ctx, ids, inserted, leased,
			keys, ups, prios, clients, paths, bodies, deadlines, maxes, avails, hooks, nows, due, owners, expires, customs, runs)
	}
	for i, h := range takers {
		if h != nil && (err != nil || !inserted[i] || !leased[i]) {
			h.untake()
			takers[i] = nil
		}
	}
	if err != nil {
		return fail(err)
	}
	s.notifyLater(late)
	signaled := map[string]bool{}
	for i, p := range items {
		if h := takers[i]; h != nil {
			j := leasedJob(p, ids[i], h)
			out[i] = InsertResult{Job: j}
			h.deliver(j)
			continue
		}
		if inserted[i] {
			out[i] = InsertResult{Job: insertedJob(p, ids[i])}
			if !signaled[p.Upstream] {
				signaled[p.Upstream] = true
				s.notes.signal(p.Upstream)
			}
			continue
		}
		j, err := scanPgJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE client = $1 AND idempotency_key = $2`, p.Client, p.IdempotencyKey))
		if err != nil {
			errs[i] = fmt.Errorf("inserting job: reading existing key: %w", mapPgErr(err))
			continue
		}
		out[i] = InsertResult{Job: j, Existing: true}
	}
	return out, errs
}

// pgInsertPlain inserts rows without idempotency keys: nothing can
// conflict, so it needs neither pgInsertGroup's id CTE nor its conflict
// clause and join. A plain INSERT … SELECT over unnest inserts rows in array
// order, each drawing its id from the sequence as it goes in, so the ids in
// ascending order are the rows in input order. Rows with an owner ($12)
// start leased unless their upstream is paused, as in pgInsertGroup. $11
// lists the upstreams to NOTIFY (see pgInsertGroup).
const pgInsertPlain = `WITH u AS (
		SELECT u.*, u.ow IS NOT NULL AND u.up <> ALL (ARRAY(SELECT upstream FROM sluice_paused_upstreams)) AS leased
		FROM unnest($1::text[], $2::smallint[], $3::text[], $4::text[], $5::bytea[], $6::timestamptz[], $7::int[],
			$8::timestamptz[], $9::text[], $10::timestamptz[], $12::text[], $13::timestamptz[], $14::text[], $15::text[])
			AS u(up, pr, cl, pa, bo, dl, ma, av, wh, nw, ow, ex, cu, ru)),
	ins AS (
		INSERT INTO sluice_jobs (upstream, priority, client, path, body, deadline, max_attempts,
			state, available_at, webhook_url, created_at, updated_at, lease_token, lease_owner, lease_expires_at,
			custom_id, run_id)
		SELECT u.up, u.pr, u.cl, u.pa, u.bo, u.dl, u.ma, CASE WHEN u.leased THEN 'running' ELSE 'queued' END,
			u.av, u.wh, u.nw, u.nw, CASE WHEN u.leased THEN 1 ELSE 0 END, CASE WHEN u.leased THEN u.ow ELSE '' END,
			CASE WHEN u.leased THEN u.ex END, u.cu, u.ru
		FROM u
		RETURNING id, state = 'running'),
	n AS (SELECT pg_notify('` + notifyChannel + `', x) FROM unnest($11::text[]) x)
	SELECT ins.*, (SELECT count(*) FROM n) FROM ins`

// queryInsertPlain runs pgInsertPlain and fills, in input order, each row's
// id and whether it was leased.
func (s *postgresStore) queryInsertPlain(ctx context.Context, ids []int64, inserted, leased []bool, args ...any) error {
	rows, err := s.pool.Query(ctx, pgInsertPlain, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		id    int64
		lease bool
	}
	got := make([]row, 0, len(ids))
	for rows.Next() {
		var r row
		var notified int64
		if err := rows.Scan(&r.id, &r.lease, &notified); err != nil {
			return err
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(got) != len(ids) {
		return fmt.Errorf("insert returned %d ids for %d rows", len(got), len(ids))
	}
	slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.id, b.id) })
	for i, r := range got {
		ids[i], inserted[i], leased[i] = r.id, true, r.lease
	}
	return nil
}

// queryInsertGroup runs pgInsertGroup and fills, by input position, each
// row's id and whether it was inserted and leased.
func (s *postgresStore) queryInsertGroup(ctx context.Context, ids []int64, inserted, leased []bool, args ...any) error {
	rows, err := s.pool.Query(ctx, pgInsertGroup, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ord, id, notified int64
		var ok, lease bool
		if err := rows.Scan(&ord, &id, &ok, &lease, &notified); err != nil {
			return err
		}
		if ord < 1 || ord > int64(len(ids)) {
			return fmt.Errorf("insert returned ordinality %d of %d", ord, len(ids))
		}
		ids[ord-1], inserted[ord-1], leased[ord-1] = id, ok, lease
	}
	return rows.Err()
}

// notifyDue splits the distinct upstreams among ups into those this store
// has not NOTIFYed within notifyCooldown (due now; marked notified) and the
// rest (late: NOTIFYed by trailingNotify once the insert has committed).
// Every NOTIFY serializes its commit on PostgreSQL's notification queue
// lock, so a stream of inserts sends about one per upstream per cooldown
// instead of one per commit, and every insert is still followed by a
// NOTIFY. This node's own workers are woken in-process on every insert.
func (s *postgresStore) notifyDue(ups []string) (due, late []string) {
	now := s.opts.Clock.Now()
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	for _, u := range distinct(ups) {
		if last, ok := s.notified[u]; ok && now.Sub(last) < notifyCooldown && !now.Before(last) {
			late = append(late, u)
			continue
		}
		s.notified[u] = now
		due = append(due, u)
	}
	return due, late
}

// notifyLater queues NOTIFYs for trailingNotify; call it after the insert
// committed.
func (s *postgresStore) notifyLater(ups []string) {
	if len(ups) == 0 {
		return
	}
	s.notifyMu.Lock()
	for _, u := range ups {
		s.lateNotify[u] = true
	}
	s.notifyMu.Unlock()
	select {
	case s.notifyKick <- struct{}{}:
	default:
	}
}

// trailingNotify sends the NOTIFYs notifyDue held back, one cooldown after
// the first of them, until ctx ends.
func (s *postgresStore) trailingNotify(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.notifyKick:
		}
		if clockSleep(ctx, s.opts, notifyCooldown) != nil {
			return
		}
		s.notifyMu.Lock()
		ups := make([]string, 0, len(s.lateNotify))
		now := s.opts.Clock.Now()
		for u := range s.lateNotify {
			ups = append(ups, u)
			s.notified[u] = now
		}
		clear(s.lateNotify)
		s.notifyMu.Unlock()
		// A lost NOTIFY costs latency on other nodes only: they poll.
		_, _ = s.pool.Exec(ctx, `SELECT pg_notify('`+notifyChannel+`', u) FROM unnest($1::text[]) AS u`, ups)
	}
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

// textOrNil is s for a text array, NULL when empty.
func textOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
