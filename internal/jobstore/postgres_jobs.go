package jobstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

func pgInsertArgs(p InsertParams, batchID string) []any {
	return []any{pgText(p.IdempotencyKey), p.Upstream, int16(p.Priority), p.Client, p.Path, p.Body,
		pgTime(p.Deadline), p.MaxAttempts, pgTime(p.AvailableAt), pgText(batchID), pgText(p.CustomID),
		p.WebhookURL, pgTime(p.Now), pgTime(p.Now)}
}

func (s *postgresStore) Insert(ctx context.Context, p InsertParams) (InsertResult, error) {
	if err := p.validateInsert(); err != nil {
		return InsertResult{}, fmt.Errorf("inserting job: %w", err)
	}
	p = p.normalized()
	res, err := s.inserts.do(ctx, p)
	if err != nil {
		return InsertResult{}, err
	}
	return res, nil
}

func (s *postgresStore) Get(ctx context.Context, id int64) (*Job, error) {
	j, err := scanPgJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE id = $1`, id))
	if err != nil {
		return nil, fmt.Errorf("getting job %d: %w", id, mapPgErr(err))
	}
	return j, nil
}

// pgWhere builds "col = $n" conditions numbering from len(args)+1.
type pgWhere struct {
	conds []string
	args  []any
}

func (w *pgWhere) add(cond string, arg any) {
	w.args = append(w.args, arg)
	w.conds = append(w.conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(w.args))))
}

func (w *pgWhere) addIf(col, val string) {
	if val != "" {
		w.add(col+" = $?", val)
	}
}

func (w *pgWhere) String() string { return strings.Join(w.conds, " AND ") }

func (s *postgresStore) List(ctx context.Context, p ListParams) (JobPage, error) {
	var w pgWhere
	order := "id"
	switch {
	case !p.NewestFirst:
		w.add("id > $?", p.After)
	case p.After > 0:
		w.add("id < $?", p.After)
		order = "id DESC"
	default:
		w.add("id < $?", int64(math.MaxInt64))
		order = "id DESC"
	}
	w.addIf("state", string(p.State))
	w.addIf("upstream", p.Upstream)
	w.addIf("client", p.Client)
	if p.BatchID != "" {
		w.add(pgInBatch, p.BatchID)
	}
	w.addIf("run_id", p.RunID)
	limit := pageLimit(p.Limit)
	w.args = append(w.args, limit+1)
	// Planned for these values (see newPgPool): which filters are set, and
	// how selective, varies from call to call.
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE `+w.String()+
		` ORDER BY `+order+` LIMIT $`+strconv.Itoa(len(w.args)), append([]any{pgx.QueryExecModeSimpleProtocol}, w.args...)...)
	if err != nil {
		return JobPage{}, fmt.Errorf("listing jobs: %w", err)
	}
	jobs, err := collectPgJobs(rows)
	if err != nil {
		return JobPage{}, fmt.Errorf("listing jobs: %w", err)
	}
	return pageOf(jobs, limit), nil
}

// pgClaim leases jobs in one statement. The rows are gathered into an
// array (= ANY(ARRAY(…))) rather than joined with IN (…): with IN the
// planner may hash-join the locked rows against a sequential scan of the
// whole table, finished jobs included, which made a claim's cost grow with
// the table (BENCHMARKS.md, "Tuning notes"). The array holds
// the locked rows' physical addresses (ctid), so the update fetches each
// directly instead of probing the primary key again: a row locked FOR
// UPDATE keeps its address until the statement ends. (A row another
// transaction rewrote after this statement's snapshot was taken, and that
// still qualifies, is then invisible to the update and simply stays queued
// for the next claim.)
const pgClaim = `UPDATE sluice_jobs SET state = 'running', lease_token = lease_token + 1, lease_owner = $1,
	lease_expires_at = $2, updated_at = $3
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM sluice_jobs WHERE state = 'queued' %s AND available_at <= $3
		AND (deadline IS NULL OR deadline > $3)
		AND upstream NOT IN (SELECT upstream FROM sluice_paused_upstreams)
		ORDER BY priority, available_at, id LIMIT $4 FOR UPDATE SKIP LOCKED))
	RETURNING ` + jobColumns

var (
	pgClaimAny              = fmt.Sprintf(pgClaim, "")
	pgClaimUpstream         = fmt.Sprintf(pgClaim, "AND upstream = $5")
	pgClaimPriority         = fmt.Sprintf(pgClaim, "AND priority = $5")
	pgClaimUpstreamPriority = fmt.Sprintf(pgClaim, "AND upstream = $5 AND priority = $6")
)

func (s *postgresStore) Claim(ctx context.Context, p ClaimParams) ([]*Job, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	q, args := pgClaimAny, []any{p.Owner, pgTime(p.Now.Add(p.LeaseFor)), pgTime(p.Now), p.Limit}
	switch {
	case p.Upstream != "" && p.Priority != nil:
		q, args = pgClaimUpstreamPriority, append(args, p.Upstream, int16(*p.Priority))
	case p.Upstream != "":
		q, args = pgClaimUpstream, append(args, p.Upstream)
	case p.Priority != nil:
		q, args = pgClaimPriority, append(args, int16(*p.Priority))
	}
	if !p.DeadlineBy.IsZero() {
		// Rare (a routed class): the filter goes in front of the claim's
		// own, as the next parameter.
		args = append(args, pgTime(p.DeadlineBy))
		q = strings.Replace(q, "WHERE state = 'queued'", fmt.Sprintf("WHERE state = 'queued' AND deadline <= $%d", len(args)), 1)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	jobs, err := collectPgJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("claiming jobs: %w", err)
	}
	sortClaimed(jobs)
	return jobs, nil
}

// pgLeaseMiss explains why a fenced update touched nothing.
func pgLeaseMiss(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id int64) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM sluice_jobs WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return ErrLeaseLost
}

func (s *postgresStore) fenced(ctx context.Context, id int64, q string, args ...any) error {
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return mapPgErr(err)
	}
	if tag.RowsAffected() == 0 {
		return pgLeaseMiss(ctx, s.pool, id)
	}
	return nil
}

func (s *postgresStore) Heartbeat(ctx context.Context, p HeartbeatParams) error {
	err := s.fenced(ctx, p.ID, `UPDATE sluice_jobs SET lease_expires_at = $1, updated_at = $2
		WHERE id = $3 AND lease_token = $4 AND state = 'running'`,
		pgTime(p.Now.Add(p.LeaseFor)), pgTime(p.Now), p.ID, p.Token)
	if err != nil {
		return fmt.Errorf("heartbeat of job %d: %w", p.ID, err)
	}
	return nil
}

func (s *postgresStore) Complete(ctx context.Context, p CompleteParams) error {
	if _, err := s.completes.do(ctx, p); err != nil {
		return fmt.Errorf("completing job %d: %w", p.ID, err)
	}
	return nil
}

// completeOne completes one job with its own statement.
func (s *postgresStore) completeOne(ctx context.Context, p CompleteParams) error {
	r := p.Result
	return s.fenced(ctx, p.ID, `UPDATE sluice_jobs SET state = 'succeeded', attempts = attempts + 1,
		result_status = $1, result_header = $2, result_body = $3, usage_input = $4, usage_output = $5,
		usage_cache_creation = $6, usage_cache_read = $7, lease_expires_at = NULL, finished_at = $8, updated_at = $8
		WHERE id = $9 AND lease_token = $10 AND state = 'running'`,
		r.Status, string(encodeHeader(r.Header)), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
		r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, pgTime(p.Now), p.ID, p.Token)
}

func (s *postgresStore) Fail(ctx context.Context, p FailParams) (State, error) {
	state, err := s.fail(ctx, p)
	if err != nil {
		return "", fmt.Errorf("failing job %d: %w", p.ID, err)
	}
	return state, nil
}

func (s *postgresStore) fail(ctx context.Context, p FailParams) (State, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	state, upstream, ok, err := pgFailLeased(ctx, tx, p)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", pgLeaseMiss(ctx, tx, p.ID)
	}
	if state == StateQueued {
		if _, err := tx.Exec(ctx, `SELECT pg_notify('`+notifyChannel+`', $1)`, upstream); err != nil {
			return "", err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	if state == StateQueued {
		s.notes.signal(upstream)
	}
	return state, nil
}

// pgFailLeased fails job p.ID in tx if it is running under p.Token (ok
// false when it is not), returning the state it went to and its upstream.
func pgFailLeased(ctx context.Context, tx pgx.Tx, p FailParams) (state State, upstream string, ok bool, err error) {
	var attempts, maxAttempts int
	var dl = pgTime(time.Time{})
	err = tx.QueryRow(ctx, `SELECT attempts, max_attempts, deadline, upstream FROM sluice_jobs
		WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE`, p.ID, p.Token).Scan(&attempts, &maxAttempts, &dl, &upstream)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	state, attemptsAfter, retryAt := failOutcome(p, attempts, maxAttempts, fromPgTime(dl))
	e := recordedError(p.Error, attempts, p.Now)
	fin := pgTime(time.Time{})
	if state == StateDead {
		fin = pgTime(p.Now)
	}
	args := []any{string(state), attemptsAfter, pgTime(retryAt), string(encodeAttemptError(e)), fin, pgTime(p.Now), p.ID}
	set := ""
	if state == StateDead && p.Result != nil {
		set = `, result_status = $8, result_header = $9, result_body = $10`
		args = append(args, p.Result.Status, string(encodeHeader(p.Result.Header)), nonNil(p.Result.Body))
	}
	appendErr := `errors || jsonb_build_array($4::jsonb)`
	if p.Kind == FailReschedule && p.Error.Unrecorded() {
		appendErr = `CASE WHEN $4::text IS NULL THEN errors ELSE errors END`
	}
	if _, err := tx.Exec(ctx, `UPDATE sluice_jobs SET state = $1, attempts = $2, available_at = $3,
		errors = `+appendErr+`, lease_expires_at = NULL, finished_at = $5, updated_at = $6`+set+`
		WHERE id = $7`, args...); err != nil {
		return "", "", false, err
	}
	return state, upstream, true, nil
}

func (s *postgresStore) RecordAttempt(ctx context.Context, p RecordAttemptParams) error {
	if err := s.recordAttempt(ctx, p); err != nil {
		return fmt.Errorf("recording an attempt of job %d: %w", p.ID, mapPgErr(err))
	}
	return nil
}

func (s *postgresStore) recordAttempt(ctx context.Context, p RecordAttemptParams) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var attempts, maxAttempts int
	err = tx.QueryRow(ctx, `SELECT attempts, max_attempts FROM sluice_jobs
		WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE`, p.ID, p.Token).Scan(&attempts, &maxAttempts)
	if errors.Is(err, pgx.ErrNoRows) {
		return pgLeaseMiss(ctx, tx, p.ID)
	}
	if err != nil {
		return err
	}
	if attempts+1 >= maxAttempts {
		return fmt.Errorf("%w: attempt %d is the job's last (max_attempts %d)", ErrConflict, attempts+1, maxAttempts)
	}
	e := recordedError(p.Error, attempts, p.Now)
	if _, err := tx.Exec(ctx, `UPDATE sluice_jobs SET attempts = attempts + 1, errors = errors || jsonb_build_array($1::jsonb),
		updated_at = $2 WHERE id = $3`, string(encodeAttemptError(e)), pgTime(p.Now), p.ID); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *postgresStore) Cancel(ctx context.Context, p CancelParams) (CancelResult, error) {
	res, err := s.cancel1(ctx, p)
	if err != nil {
		return CancelResult{}, fmt.Errorf("canceling job %d: %w", p.ID, err)
	}
	return res, nil
}

func (s *postgresStore) cancel1(ctx context.Context, p CancelParams) (CancelResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return CancelResult{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	j, err := scanPgJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM sluice_jobs WHERE id = $1 FOR UPDATE`, p.ID))
	if err != nil {
		return CancelResult{}, mapPgErr(err)
	}
	switch j.State {
	case StateCanceled:
		return CancelResult{Job: j}, nil
	case StateSucceeded, StateDead:
		return CancelResult{}, fmt.Errorf("%w: job is %s", ErrConflict, j.State)
	case StateQueued, StateRunning:
		// Still live: cancel it below.
	}
	prev := j.State
	j, err = scanPgJob(tx.QueryRow(ctx, `UPDATE sluice_jobs SET state = 'canceled', lease_expires_at = NULL,
		finished_at = $1, updated_at = $1 WHERE id = $2 RETURNING `+jobColumns, pgTime(p.Now), p.ID))
	if err != nil {
		return CancelResult{}, mapPgErr(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return CancelResult{}, err
	}
	return CancelResult{Job: j, WasLive: true, WasRunning: prev == StateRunning}, nil
}

func (s *postgresStore) CompleteSpooled(ctx context.Context, p CompleteParams) error {
	r := p.Result
	tag, err := s.pool.Exec(ctx, `UPDATE sluice_jobs SET state = 'succeeded', attempts = attempts + 1,
		result_status = $1, result_header = $2, result_body = $3, usage_input = $4, usage_output = $5,
		usage_cache_creation = $6, usage_cache_read = $7, lease_expires_at = NULL, finished_at = $8, updated_at = $8
		WHERE id = $9 AND lease_token >= $10 AND state IN ('queued', 'running')`,
		r.Status, string(encodeHeader(r.Header)), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
		r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, pgTime(p.Now), p.ID, p.Token)
	if err == nil && tag.RowsAffected() == 0 {
		var state string
		err = s.pool.QueryRow(ctx, `SELECT state FROM sluice_jobs WHERE id = $1`, p.ID).Scan(&state)
		if err == nil {
			err = fmt.Errorf("%w: job is %s", ErrConflict, state)
		}
	}
	if err != nil {
		return fmt.Errorf("completing spooled job %d: %w", p.ID, mapPgErr(err))
	}
	return nil
}
