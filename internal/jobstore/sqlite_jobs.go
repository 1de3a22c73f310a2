package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
)

const sqliteInsert = `INSERT INTO sluice_jobs (idempotency_key, upstream, priority, client, path, body,
	deadline, max_attempts, state, available_at, batch_id, custom_id, webhook_url, created_at, updated_at, run_id)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)`

// sqliteInsertLeased inserts a job already leased to a Handoff's worker,
// unless its upstream is paused (then it queues, as sqliteInsert would);
// its arguments are sqliteInsertArgs then the lease owner and expiry. The
// pause is read in the statement, not by a separate query, which cost the
// writer time under single submits (BENCHMARKS.md, "Tuning notes").
// ("WHERE true" keeps SQLite from reading the ON CONFLICT that follows as
// a join constraint.)
const sqliteInsertLeased = `INSERT INTO sluice_jobs (idempotency_key, upstream, priority, client, path, body,
	deadline, max_attempts, state, available_at, batch_id, custom_id, webhook_url, created_at, updated_at, run_id,
	lease_token, lease_owner, lease_expires_at)
	SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, CASE WHEN paused THEN 'queued' ELSE 'running' END, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
		CASE WHEN paused THEN 0 ELSE 1 END, CASE WHEN paused THEN '' ELSE ?16 END, CASE WHEN paused THEN NULL ELSE ?17 END
	FROM (SELECT EXISTS (SELECT 1 FROM sluice_paused_upstreams WHERE upstream = ?2) AS paused) WHERE true`

func sqliteInsertArgs(p InsertParams, batchID string) []any {
	return []any{nullString(p.IdempotencyKey), p.Upstream, int(p.Priority), p.Client, p.Path, p.Body,
		nullMicros(p.Deadline), p.MaxAttempts, micros(p.AvailableAt), nullString(batchID), nullString(p.CustomID),
		p.WebhookURL, micros(p.Now), micros(p.Now), nullString(p.RunID)}
}

func (s *sqliteStore) Insert(ctx context.Context, p InsertParams) (InsertResult, error) {
	if err := p.validateInsert(); err != nil {
		return InsertResult{}, fmt.Errorf("inserting job: %w", err)
	}
	p = p.normalized()
	var res InsertResult
	h := s.handoffFor(p)
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		q, args := sqliteInsert, sqliteInsertArgs(p, "")
		if h != nil {
			q, args = sqliteInsertLeased, append(args, h.owner, micros(p.Now.Add(h.leaseFor)))
		}
		// Only the id comes back: the row is what p says (reading all of
		// it back cost the writer time under single submits).
		var id int64
		var state string
		err := tx.QueryRowContext(ctx, q+` ON CONFLICT (client, idempotency_key) DO NOTHING RETURNING id, state`, args...).Scan(&id, &state)
		if errors.Is(err, sql.ErrNoRows) {
			j, err := scanSQLiteJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE client = ? AND idempotency_key = ?`, p.Client, p.IdempotencyKey))
			res = InsertResult{Job: j, Existing: true}
			return err
		}
		if err != nil {
			return mapSQLiteErr(err)
		}
		if state == string(StateRunning) {
			res = InsertResult{Job: leasedJob(p, id, h)}
			return nil
		}
		res = InsertResult{Job: insertedJob(p, id)}
		*sig = append(*sig, p.Upstream)
		return nil
	})
	if h != nil {
		if err == nil && !res.Existing && res.Job.State == StateRunning {
			h.deliver(res.Job)
		} else {
			h.untake()
		}
	}
	if err != nil {
		return InsertResult{}, fmt.Errorf("inserting job: %w", err)
	}
	return res, nil
}

func (s *sqliteStore) Get(ctx context.Context, id int64) (*Job, error) {
	j, err := scanSQLiteJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("getting job %d: %w", id, err)
	}
	return j, nil
}

func (s *sqliteStore) List(ctx context.Context, p ListParams) (JobPage, error) {
	where, args, order := []string{"id > ?"}, []any{p.After}, "id"
	if p.NewestFirst {
		where, order = []string{"id < ?"}, "id DESC"
		if p.After == 0 {
			args = []any{int64(math.MaxInt64)}
		}
	}
	for _, f := range []struct{ col, val string }{{"state", string(p.State)}, {"upstream", p.Upstream}, {"client", p.Client}, {"batch_id", p.BatchID}, {"run_id", p.RunID}} {
		if f.val != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.val)
		}
	}
	limit := pageLimit(p.Limit)
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE `+strings.Join(where, " AND ")+` ORDER BY `+order+` LIMIT ?`, args...)
	if err != nil {
		return JobPage{}, fmt.Errorf("listing jobs: %w", err)
	}
	jobs, err := collectSQLiteJobs(rows)
	if err != nil {
		return JobPage{}, fmt.Errorf("listing jobs: %w", err)
	}
	return pageOf(jobs, limit), nil
}

func (s *sqliteStore) Claim(ctx context.Context, p ClaimParams) ([]*Job, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	now := micros(p.Now)
	// INDEXED BY pins the claim index: the planner would otherwise take
	// the (upstream, available_at) index and sort the whole backlog.
	filter, index, args := "", "sluice_jobs_claim_any", []any{p.Owner, micros(p.Now.Add(p.LeaseFor)), now}
	if p.Upstream != "" {
		filter, index = "upstream = ? AND ", "sluice_jobs_claim_upstream"
		args = append(args, p.Upstream)
	}
	if p.Priority != nil {
		filter += "priority = ? AND "
		args = append(args, int(*p.Priority))
	}
	if !p.DeadlineBy.IsZero() {
		filter += "deadline <= ? AND "
		args = append(args, micros(p.DeadlineBy))
	}
	args = append(args, now, now, p.Limit)
	q := `UPDATE sluice_jobs SET state = 'running', lease_token = lease_token + 1, lease_owner = ?,
		lease_expires_at = ?, updated_at = ?
		WHERE id IN (SELECT id FROM sluice_jobs INDEXED BY ` + index + ` WHERE state = 'queued' AND ` + filter + `available_at <= ?
			AND (deadline IS NULL OR deadline > ?)
			AND upstream NOT IN (SELECT upstream FROM sluice_paused_upstreams)
			ORDER BY priority, available_at, id LIMIT ?)
		RETURNING ` + jobColumns
	var jobs []*Job
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		jobs, err = collectSQLiteJobs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	sortClaimed(jobs)
	return jobs, nil
}

// leaseMiss explains why a fenced update touched nothing: the job is gone
// (ErrNotFound) or no longer held by that token (ErrLeaseLost).
func sqliteLeaseMiss(ctx context.Context, tx sqliteTx, id int64) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sluice_jobs WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return ErrLeaseLost
}

func (s *sqliteStore) fenced(ctx context.Context, id int64, q string, args ...any) error {
	return s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		r, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return sqliteLeaseMiss(ctx, tx, id)
		}
		return nil
	})
}

func (s *sqliteStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	err := s.fenced(ctx, p.ID, `UPDATE sluice_jobs SET lease_expires_at = ?, updated_at = ?
		WHERE id = ? AND lease_token = ? AND state = 'running'`,
		micros(p.Now.Add(p.LeaseFor)), micros(p.Now), p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("heartbeat of job %d: %w", p.ID, err)
	}
	return nil
}

func (s *sqliteStore) Complete(ctx context.Context, p CompleteParams) error {
	now, r := micros(p.Now), p.Result
	err := s.fenced(ctx, p.ID, `UPDATE sluice_jobs SET state = 'succeeded', attempts = attempts + 1,
		result_status = ?, result_header = ?, result_body = ?, usage_input = ?, usage_output = ?,
		usage_cache_creation = ?, usage_cache_read = ?, lease_expires_at = NULL, finished_at = ?, updated_at = ?
		WHERE id = ? AND lease_token = ? AND state = 'running'`,
		r.Status, encodeHeader(r.Header), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
		r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, now, now, p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("completing job %d: %w", p.ID, err)
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (s *sqliteStore) Fail(ctx context.Context, p FailParams) (State, error) {
	var final State
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		state, upstream, ok, err := sqliteFailLeased(ctx, tx, p)
		if err != nil {
			return err
		}
		if !ok {
			return sqliteLeaseMiss(ctx, tx, p.ID)
		}
		final = state
		if state == StateQueued {
			*sig = append(*sig, upstream)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("failing job %d: %w", p.ID, err)
	}
	return final, nil
}

// sqliteFailLeased fails job p.ID in tx if it is running under p.Token
// (ok false when it is not), returning the state it went to and its
// upstream.
func sqliteFailLeased(ctx context.Context, tx sqliteTx, p FailParams) (state State, upstream string, ok bool, err error) {
	var attempts, maxAttempts int
	var deadline sql.NullInt64
	err = tx.QueryRowContext(ctx, `SELECT attempts, max_attempts, deadline, upstream FROM sluice_jobs
		WHERE id = ? AND lease_token = ? AND state = 'running'`, p.ID, p.Token).Scan(&attempts, &maxAttempts, &deadline, &upstream)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	state, attemptsAfter, retryAt := failOutcome(p, attempts, maxAttempts, fromMicros(deadline))
	e := recordedError(p.Error, attempts, p.Now)
	now := micros(p.Now)
	fin := sql.NullInt64{}
	if state == StateDead {
		fin = sql.NullInt64{Int64: now, Valid: true}
	}
	args := []any{string(state), attemptsAfter, micros(retryAt), string(encodeAttemptError(e)), fin, now}
	set := ""
	if state == StateDead && p.Result != nil {
		set = `, result_status = ?, result_header = ?, result_body = ?`
		args = append(args, p.Result.Status, encodeHeader(p.Result.Header), nonNil(p.Result.Body))
	}
	args = append(args, p.ID)
	appendErr := `json_insert(errors, '$[#]', json(?))`
	if p.Kind == FailReschedule && p.Error.Unrecorded() {
		appendErr = `coalesce(?, errors)` // keeps the argument list
		args[3] = nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sluice_jobs SET state = ?, attempts = ?, available_at = ?,
		errors = `+appendErr+`, lease_expires_at = NULL, finished_at = ?, updated_at = ?`+set+`
		WHERE id = ?`, args...); err != nil {
		return "", "", false, err
	}
	return state, upstream, true, nil
}

func (s *sqliteStore) RecordAttempt(ctx context.Context, p RecordAttemptParams) error {
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var attempts, maxAttempts int
		err := tx.QueryRowContext(ctx, `SELECT attempts, max_attempts FROM sluice_jobs
			WHERE id = ? AND lease_token = ? AND state = 'running'`, p.ID, p.Token).Scan(&attempts, &maxAttempts)
		if errors.Is(err, sql.ErrNoRows) {
			return sqliteLeaseMiss(ctx, tx, p.ID)
		}
		if err != nil {
			return err
		}
		if attempts+1 >= maxAttempts {
			return fmt.Errorf("%w: attempt %d is the job's last (max_attempts %d)", ErrConflict, attempts+1, maxAttempts)
		}
		e := recordedError(p.Error, attempts, p.Now)
		_, err = tx.ExecContext(ctx, `UPDATE sluice_jobs SET attempts = attempts + 1, errors = json_insert(errors, '$[#]', json(?)),
			updated_at = ? WHERE id = ?`, string(encodeAttemptError(e)), micros(p.Now), p.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording an attempt of job %d: %w", p.ID, err)
	}
	return nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func (s *sqliteStore) Cancel(ctx context.Context, p CancelParams) (CancelResult, error) {
	var res CancelResult
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		j, err := scanSQLiteJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE id = ?`, p.ID))
		if err != nil {
			return err
		}
		switch j.State {
		case StateCanceled:
			res = CancelResult{Job: j}
			return nil
		case StateSucceeded, StateDead:
			return fmt.Errorf("%w: job is %s", ErrConflict, j.State)
		case StateQueued, StateRunning:
			// Still live: cancel it below.
		}
		prev, now := j.State, micros(p.Now)
		j, err = scanSQLiteJob(tx.QueryRowContext(ctx, `UPDATE sluice_jobs SET state = 'canceled', lease_expires_at = NULL,
			finished_at = ?, updated_at = ? WHERE id = ? RETURNING `+jobColumns, now, now, p.ID))
		res = CancelResult{Job: j, WasLive: true, WasRunning: prev == StateRunning}
		return err
	})
	if err != nil {
		return CancelResult{}, fmt.Errorf("canceling job %d: %w", p.ID, err)
	}
	return res, nil
}

func (s *sqliteStore) CompleteSpooled(ctx context.Context, p CompleteParams) error {
	now, r := micros(p.Now), p.Result
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		res, err := tx.ExecContext(ctx, `UPDATE sluice_jobs SET state = 'succeeded', attempts = attempts + 1,
			result_status = ?, result_header = ?, result_body = ?, usage_input = ?, usage_output = ?,
			usage_cache_creation = ?, usage_cache_read = ?, lease_expires_at = NULL, finished_at = ?, updated_at = ?
			WHERE id = ? AND lease_token >= ? AND state IN ('queued', 'running')`,
			r.Status, encodeHeader(r.Header), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
			r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, now, now, p.ID, p.Token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return sqliteSpoolMiss(ctx, tx, p.ID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("completing spooled job %d: %w", p.ID, err)
	}
	return nil
}

// sqliteSpoolMiss explains why CompleteSpooled touched nothing.
func sqliteSpoolMiss(ctx context.Context, tx sqliteTx, id int64) error {
	var state string
	err := tx.QueryRowContext(ctx, `SELECT state FROM sluice_jobs WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: job is %s", ErrConflict, state)
}
