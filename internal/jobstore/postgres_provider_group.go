package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The provider groups on PostgreSQL (provider_group.go). Candidates and
// open groups are locked FOR UPDATE SKIP LOCKED, so nodes forming or
// leasing groups at once never take the same job or group.

func scanPgGroup(row pgx.Row) (*Group, error) {
	var g Group
	var state string
	var lease, pull, started, created, submitted, ended, upd pgtype.Timestamptz
	if err := row.Scan(&g.ID, &g.Upstream, &state, &g.ProviderID, &g.Lease.Owner, &g.Lease.Token, &lease, &g.Jobs, &g.Bytes,
		&pull, &started, &created, &submitted, &ended, &upd); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading group: %w", mapPgErr(err))
	}
	g.State = GroupState(state)
	g.Lease.ExpiresAt, g.PullBackAt, g.SubmitStartedAt = fromPgTime(lease), fromPgTime(pull), fromPgTime(started)
	g.CreatedAt, g.SubmittedAt, g.EndedAt, g.UpdatedAt = fromPgTime(created), fromPgTime(submitted), fromPgTime(ended), fromPgTime(upd)
	return &g, nil
}

func (s *postgresStore) CreateGroup(ctx context.Context, p CreateGroupParams) (CreateGroupResult, error) {
	if err := p.validate(); err != nil {
		return CreateGroupResult{}, fmt.Errorf("creating a provider group: %w", err)
	}
	out, err := s.createGroup(ctx, p)
	if err != nil {
		return CreateGroupResult{}, fmt.Errorf("creating a provider group: %w", mapPgErr(err))
	}
	return out, nil
}

func (s *postgresStore) createGroup(ctx context.Context, p CreateGroupParams) (CreateGroupResult, error) {
	var out CreateGroupResult
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return out, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	classes := make([]int16, len(p.Classes))
	for i, c := range p.Classes {
		classes[i] = int16(c)
	}
	rows, err := tx.Query(ctx, `SELECT id, octet_length(body), available_at, deadline FROM sluice_jobs
		WHERE state = 'queued' AND upstream = $1 AND priority = ANY($2) AND available_at <= $3
			AND (deadline IS NULL OR deadline > $4) AND ($6 = '' OR path = $6)
			AND upstream NOT IN (SELECT upstream FROM sluice_paused_upstreams)
		ORDER BY priority, available_at, id LIMIT $5 FOR UPDATE SKIP LOCKED`,
		p.Upstream, classes, pgTime(p.Now), pgTime(p.DeadlineAfter), p.MaxJobs, p.Path)
	if err != nil {
		return out, err
	}
	var cands []groupCandidate
	for rows.Next() {
		var c groupCandidate
		var avail, dl pgtype.Timestamptz
		if err := rows.Scan(&c.id, &c.bytes, &avail, &dl); err != nil {
			rows.Close()
			return out, err
		}
		c.available, c.deadline = fromPgTime(avail), fromPgTime(dl)
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, err
	}
	chosen, ok := chooseGroup(p, cands)
	if !ok {
		return out, nil
	}
	g := &Group{ID: p.ID, Upstream: p.Upstream, State: GroupPending, Lease: Lease{Token: 1, Owner: p.Owner,
		ExpiresAt: storeTime(p.Now.Add(p.LeaseFor))}, Jobs: len(chosen), PullBackAt: p.pullBackAt(chosen),
		CreatedAt: storeTime(p.Now), UpdatedAt: storeTime(p.Now)}
	ids := make([]int64, len(chosen))
	leases := make([]pgtype.Timestamptz, len(chosen))
	for i, c := range chosen {
		ids[i], leases[i] = c.id, pgTime(p.memberLease(c))
		g.Bytes += c.bytes
	}
	rows, err = tx.Query(ctx, `UPDATE sluice_jobs AS j SET state = 'running', lease_token = j.lease_token + 1,
			lease_owner = $1, lease_expires_at = m.until, updated_at = $2
		FROM unnest($3::bigint[], $4::timestamptz[]) AS m(id, until)
		WHERE j.id = m.id AND j.state = 'queued' RETURNING `+qualifiedJobColumns("j"),
		"group:"+p.ID, pgTime(p.Now), ids, leases)
	if err != nil {
		return out, err
	}
	jobs, err := collectPgJobs(rows)
	if err != nil {
		return out, err
	}
	sortClaimed(jobs)
	tokens := make([]int64, len(jobs))
	jobIDs := make([]int64, len(jobs))
	for i, j := range jobs {
		jobIDs[i], tokens[i] = j.ID, j.Lease.Token
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sluice_provider_group_jobs (group_id, job_id, job_token)
		SELECT $1, id, tok FROM unnest($2::bigint[], $3::bigint[]) AS m(id, tok)`, p.ID, jobIDs, tokens); err != nil {
		return out, err
	}
	g.Jobs = len(jobs)
	if _, err := tx.Exec(ctx, `INSERT INTO sluice_provider_groups (id, upstream, state, lease_owner, lease_token,
		lease_expires_at, jobs, bytes, pull_back_at, created_at, updated_at) VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8, $9, $9)`,
		g.ID, g.Upstream, string(g.State), g.Lease.Owner, pgTime(g.Lease.ExpiresAt), g.Jobs, g.Bytes,
		pgTime(g.PullBackAt), pgTime(p.Now)); err != nil {
		return out, err
	}
	if err := tx.Commit(ctx); err != nil {
		return out, err
	}
	return CreateGroupResult{Group: g, Jobs: jobs}, nil
}

// qualifiedJobColumns is jobColumns with each column prefixed by table.
func qualifiedJobColumns(table string) string {
	out := ""
	for i, c := range splitColumns(jobColumns) {
		if i > 0 {
			out += ", "
		}
		out += table + "." + c
	}
	return out
}

const pgGroupColumns = groupColumns

func (s *postgresStore) LeaseGroups(ctx context.Context, p LeaseGroupsParams) ([]*Group, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("leasing provider groups: %w", err)
	}
	rows, err := s.pool.Query(ctx, `UPDATE sluice_provider_groups SET
			lease_token = lease_token + (CASE WHEN lease_owner = $1 THEN 0 ELSE 1 END),
			lease_owner = $1, lease_expires_at = $2, updated_at = $3
		WHERE id = ANY(ARRAY(SELECT id FROM sluice_provider_groups WHERE upstream = $4 AND state <> 'ended'
			AND (lease_owner = $1 OR lease_expires_at <= $3) ORDER BY created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED))
		RETURNING `+pgGroupColumns,
		p.Owner, pgTime(p.Now.Add(p.LeaseFor)), pgTime(p.Now), p.Upstream, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("leasing provider groups: %w", mapPgErr(err))
	}
	defer rows.Close()
	var out []*Group
	for rows.Next() {
		g, err := scanPgGroup(rows)
		if err != nil {
			return nil, fmt.Errorf("leasing provider groups: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("leasing provider groups: %w", mapPgErr(err))
	}
	sortGroups(out)
	return out, nil
}

func (s *postgresStore) UpdateGroup(ctx context.Context, p UpdateGroupParams) (*Group, error) {
	now := pgTime(p.Now)
	g, err := scanPgGroup(s.pool.QueryRow(ctx, `UPDATE sluice_provider_groups SET
			state = coalesce(nullif($1, ''), state),
			provider_id = coalesce(nullif($2, ''), provider_id),
			submitted_at = CASE WHEN $2 <> '' AND submitted_at IS NULL THEN $3 ELSE submitted_at END,
			submit_started_at = CASE WHEN $4 AND submit_started_at IS NULL THEN $3 ELSE submit_started_at END,
			ended_at = CASE WHEN $1 = 'ended' AND ended_at IS NULL THEN $3 ELSE ended_at END,
			updated_at = $3
		WHERE id = $5 AND lease_token = $6 RETURNING `+pgGroupColumns,
		string(p.State), p.ProviderID, now, p.SubmitStarted, p.ID, p.Token))
	if errors.Is(err, ErrNotFound) {
		var one int
		if e := s.pool.QueryRow(ctx, `SELECT 1 FROM sluice_provider_groups WHERE id = $1`, p.ID).Scan(&one); errors.Is(e, pgx.ErrNoRows) {
			err = ErrNotFound
		} else {
			err = ErrLeaseLost
		}
	}
	if err != nil {
		return nil, fmt.Errorf("updating provider group %s: %w", p.ID, err)
	}
	return g, nil
}

func (s *postgresStore) GroupMembers(ctx context.Context, id string) ([]GroupMember, error) {
	rows, err := s.pool.Query(ctx, `SELECT job_id, job_token, done FROM sluice_provider_group_jobs WHERE group_id = $1 ORDER BY job_id`, id)
	if err != nil {
		return nil, fmt.Errorf("reading provider group %s: %w", id, mapPgErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupMember, error) {
		var m GroupMember
		err := r.Scan(&m.JobID, &m.Token, &m.Done)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading provider group %s: %w", id, mapPgErr(err))
	}
	return out, nil
}

func (s *postgresStore) FinishGroupLines(ctx context.Context, p FinishGroupLinesParams) (FinishGroupLinesResult, error) {
	if err := p.validate(); err != nil {
		return FinishGroupLinesResult{}, fmt.Errorf("writing back provider group lines: %w", err)
	}
	res, upstream, err := s.finishGroupLines(ctx, p)
	if err != nil {
		return FinishGroupLinesResult{}, fmt.Errorf("writing back provider group %s lines: %w", p.GroupID, mapPgErr(err))
	}
	if len(res.Finished[StateQueued]) > 0 {
		s.notes.signal(upstream)
	}
	return res, nil
}

func (s *postgresStore) finishGroupLines(ctx context.Context, p FinishGroupLinesParams) (FinishGroupLinesResult, string, error) {
	res := FinishGroupLinesResult{Finished: map[State][]int64{}}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var token int64
	var upstream string
	// The group's row is locked: two routers writing back the same group
	// (one of them about to lose its lease) take turns.
	err = tx.QueryRow(ctx, `SELECT lease_token, upstream FROM sluice_provider_groups WHERE id = $1 FOR UPDATE`, p.GroupID).Scan(&token, &upstream)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return res, "", ErrNotFound
	case err != nil:
		return res, "", err
	case token != p.Token:
		return res, "", ErrLeaseLost
	}
	for _, l := range p.Lines {
		var jobToken int64
		var done bool
		err := tx.QueryRow(ctx, `SELECT job_token, done FROM sluice_provider_group_jobs WHERE group_id = $1 AND job_id = $2`,
			p.GroupID, l.JobID).Scan(&jobToken, &done)
		if errors.Is(err, pgx.ErrNoRows) {
			return res, "", invalid("Lines", "job %d is not in group %s", l.JobID, p.GroupID)
		}
		if err != nil {
			return res, "", err
		}
		if done {
			continue
		}
		st, err := pgApplyLine(ctx, tx, l, jobToken, p.Now)
		if err != nil {
			return res, "", err
		}
		if st != "" {
			res.Finished[st] = append(res.Finished[st], l.JobID)
		}
		if e := l.Spend; e != nil && (e.Nanos > 0 || e.Requests > 0) {
			day := e.Day
			if day.IsZero() {
				day = p.Now
			}
			if _, err := tx.Exec(ctx, pgSpendUpsert, e.Client, spendDay(day), e.Upstream, e.Model, e.Nanos, e.Requests, pgTime(p.Now)); err != nil {
				return res, "", err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE sluice_provider_group_jobs SET done = true WHERE group_id = $1 AND job_id = $2`,
			p.GroupID, l.JobID); err != nil {
			return res, "", err
		}
		res.Written = append(res.Written, l.JobID)
	}
	if len(res.Finished[StateQueued]) > 0 {
		if err := s.notifyTx(ctx, tx, []string{upstream}); err != nil {
			return res, "", err
		}
	}
	var open int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM sluice_provider_group_jobs WHERE group_id = $1 AND NOT done`, p.GroupID).Scan(&open); err != nil {
		return res, "", err
	}
	if open == 0 {
		res.Ended = true
		if _, err := tx.Exec(ctx, `UPDATE sluice_provider_groups SET state = 'ended', ended_at = coalesce(ended_at, $1),
			updated_at = $1 WHERE id = $2`, pgTime(p.Now), p.GroupID); err != nil {
			return res, "", err
		}
	}
	return res, upstream, tx.Commit(ctx)
}

// pgApplyLine writes one line to its job if the group still holds it
// (token), and returns the state the job went to ("" when it is no longer
// the group's: canceled meanwhile).
func pgApplyLine(ctx context.Context, tx pgx.Tx, l GroupLine, token int64, at time.Time) (State, error) {
	if l.Fail != nil {
		st, _, _, err := pgFailLeased(ctx, tx, l.failParams(token, at))
		return st, err
	}
	now := pgTime(at)
	var (
		q     string
		args  []any
		state State
	)
	switch {
	case l.Complete != nil:
		r := l.Complete
		state = StateSucceeded
		q = `UPDATE sluice_jobs SET state = 'succeeded', attempts = attempts + 1,
			result_status = $1, result_header = $2, result_body = $3, usage_input = $4, usage_output = $5,
			usage_cache_creation = $6, usage_cache_read = $7, lease_expires_at = NULL, finished_at = $8, updated_at = $8
			WHERE id = $9 AND lease_token = $10 AND state = 'running'`
		args = []any{r.Status, string(encodeHeader(r.Header)), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
			r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, now, l.JobID, token}
	case l.Dead != nil:
		state = StateDead
		var attempts int
		err := tx.QueryRow(ctx, `SELECT attempts FROM sluice_jobs WHERE id = $1 AND lease_token = $2 AND state = 'running' FOR UPDATE`,
			l.JobID, token).Scan(&attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		e := l.deadError(attempts, at)
		set := ""
		args = []any{string(encodeAttemptError(e)), now, l.JobID, token}
		if r := l.DeadResult; r != nil {
			set = `, result_status = $5, result_header = $6, result_body = $7`
			args = append(args, r.Status, string(encodeHeader(r.Header)), nonNil(r.Body))
		}
		q = `UPDATE sluice_jobs SET state = 'dead', attempts = attempts + 1, errors = errors || jsonb_build_array($1::jsonb),
			lease_expires_at = NULL, finished_at = $2, updated_at = $2` + set + ` WHERE id = $3 AND lease_token = $4 AND state = 'running'`
	default:
		state = StateQueued
		q = `UPDATE sluice_jobs SET state = 'queued', available_at = $1, lease_expires_at = NULL, updated_at = $1
			WHERE id = $2 AND lease_token = $3 AND state = 'running'`
		args = []any{now, l.JobID, token}
	}
	tag, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return "", nil
	}
	return state, nil
}

// splitColumns splits a column list written across lines.
func splitColumns(list string) []string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}
