package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The provider groups on SQLite (provider_group.go).

const groupColumns = `id, upstream, state, provider_id, lease_owner, lease_token, lease_expires_at, jobs, bytes,
	pull_back_at, submit_started_at, created_at, submitted_at, ended_at, updated_at`

func scanSQLiteGroup(row rowScanner) (*Group, error) {
	var g Group
	var state string
	var lease, pull, started, created, submitted, ended, upd sql.NullInt64
	if err := row.Scan(&g.ID, &g.Upstream, &state, &g.ProviderID, &g.Lease.Owner, &g.Lease.Token, &lease, &g.Jobs, &g.Bytes,
		&pull, &started, &created, &submitted, &ended, &upd); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading group: %w", err)
	}
	g.State = GroupState(state)
	g.Lease.ExpiresAt, g.PullBackAt, g.SubmitStartedAt = fromMicros(lease), fromMicros(pull), fromMicros(started)
	g.CreatedAt, g.SubmittedAt, g.EndedAt, g.UpdatedAt = fromMicros(created), fromMicros(submitted), fromMicros(ended), fromMicros(upd)
	return &g, nil
}

func (s *sqliteStore) CreateGroup(ctx context.Context, p CreateGroupParams) (CreateGroupResult, error) {
	if err := p.validate(); err != nil {
		return CreateGroupResult{}, fmt.Errorf("creating a provider group: %w", err)
	}
	var out CreateGroupResult
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		out = CreateGroupResult{}
		now := micros(p.Now)
		args := []any{p.Upstream}
		marks := make([]string, len(p.Classes))
		for i, c := range p.Classes {
			marks[i] = "?"
			args = append(args, int(c))
		}
		args = append(args, now, micros(p.DeadlineAfter), p.Path, p.Path, p.MaxJobs)
		rows, err := tx.QueryContext(ctx, `SELECT id, length(body), available_at, deadline FROM sluice_jobs
			WHERE state = 'queued' AND upstream = ? AND priority IN (`+strings.Join(marks, ",")+`) AND available_at <= ?
				AND (deadline IS NULL OR deadline > ?) AND (? = '' OR path = ?)
				AND upstream NOT IN (SELECT upstream FROM sluice_paused_upstreams)
			ORDER BY priority, available_at, id LIMIT ?`, args...)
		if err != nil {
			return err
		}
		cands, err := scanGroupCandidates(rows)
		if err != nil {
			return err
		}
		chosen, ok := chooseGroup(p, cands)
		if !ok {
			return nil
		}
		g := &Group{ID: p.ID, Upstream: p.Upstream, State: GroupPending, Lease: Lease{Token: 1, Owner: p.Owner,
			ExpiresAt: storeTime(p.Now.Add(p.LeaseFor))}, Jobs: len(chosen), PullBackAt: p.pullBackAt(chosen),
			CreatedAt: storeTime(p.Now), UpdatedAt: storeTime(p.Now)}
		owner := "group:" + p.ID
		for _, c := range chosen {
			j, err := scanSQLiteJob(tx.QueryRowContext(ctx, `UPDATE sluice_jobs SET state = 'running', lease_token = lease_token + 1,
				lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE id = ? AND state = 'queued' RETURNING `+jobColumns,
				owner, micros(p.memberLease(c)), now, c.id))
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_provider_group_jobs (group_id, job_id, job_token) VALUES (?, ?, ?)`,
				p.ID, j.ID, j.Lease.Token); err != nil {
				return err
			}
			g.Bytes += c.bytes
			out.Jobs = append(out.Jobs, j)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sluice_provider_groups (id, upstream, state, lease_owner, lease_token,
			lease_expires_at, jobs, bytes, pull_back_at, created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)`,
			g.ID, g.Upstream, string(g.State), g.Lease.Owner, micros(g.Lease.ExpiresAt), g.Jobs, g.Bytes,
			nullMicros(g.PullBackAt), now, now); err != nil {
			return mapSQLiteErr(err)
		}
		out.Group = g
		return nil
	})
	if err != nil {
		return CreateGroupResult{}, fmt.Errorf("creating a provider group: %w", err)
	}
	return out, nil
}

func (s *sqliteStore) LeaseGroups(ctx context.Context, p LeaseGroupsParams) ([]*Group, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("leasing provider groups: %w", err)
	}
	var out []*Group
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		out = nil
		now := micros(p.Now)
		rows, err := tx.QueryContext(ctx, `UPDATE sluice_provider_groups SET
				lease_token = lease_token + (CASE WHEN lease_owner = ? THEN 0 ELSE 1 END),
				lease_owner = ?, lease_expires_at = ?, updated_at = ?
			WHERE id IN (SELECT id FROM sluice_provider_groups WHERE upstream = ? AND state <> 'ended'
				AND (lease_owner = ? OR lease_expires_at <= ?) ORDER BY created_at, id LIMIT ?)
			RETURNING `+groupColumns,
			p.Owner, p.Owner, micros(p.Now.Add(p.LeaseFor)), now, p.Upstream, p.Owner, now, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			g, err := scanSQLiteGroup(rows)
			if err != nil {
				return err
			}
			out = append(out, g)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("leasing provider groups: %w", err)
	}
	sortGroups(out)
	return out, nil
}

func (s *sqliteStore) UpdateGroup(ctx context.Context, p UpdateGroupParams) (*Group, error) {
	var g *Group
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		now := micros(p.Now)
		var err error
		g, err = scanSQLiteGroup(tx.QueryRowContext(ctx, `UPDATE sluice_provider_groups SET
				state = coalesce(nullif(?, ''), state),
				provider_id = coalesce(nullif(?, ''), provider_id),
				submitted_at = CASE WHEN ? <> '' AND submitted_at IS NULL THEN ? ELSE submitted_at END,
				submit_started_at = CASE WHEN ? AND submit_started_at IS NULL THEN ? ELSE submit_started_at END,
				ended_at = CASE WHEN ? = 'ended' AND ended_at IS NULL THEN ? ELSE ended_at END,
				updated_at = ?
			WHERE id = ? AND lease_token = ? RETURNING `+groupColumns,
			string(p.State), p.ProviderID, p.ProviderID, now, p.SubmitStarted, now, string(p.State), now, now, p.ID, p.Token))
		if errors.Is(err, ErrNotFound) {
			var one int
			if e := tx.QueryRowContext(ctx, `SELECT 1 FROM sluice_provider_groups WHERE id = ?`, p.ID).Scan(&one); errors.Is(e, sql.ErrNoRows) {
				return ErrNotFound
			}
			return ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating provider group %s: %w", p.ID, err)
	}
	return g, nil
}

func (s *sqliteStore) GroupMembers(ctx context.Context, id string) ([]GroupMember, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT job_id, job_token, done FROM sluice_provider_group_jobs WHERE group_id = ? ORDER BY job_id`, id)
	if err != nil {
		return nil, fmt.Errorf("reading provider group %s: %w", id, err)
	}
	defer rows.Close()
	var out []GroupMember
	for rows.Next() {
		var m GroupMember
		if err := rows.Scan(&m.JobID, &m.Token, &m.Done); err != nil {
			return nil, fmt.Errorf("reading provider group %s: %w", id, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading provider group %s: %w", id, err)
	}
	return out, nil
}

func (s *sqliteStore) FinishGroupLines(ctx context.Context, p FinishGroupLinesParams) (FinishGroupLinesResult, error) {
	if err := p.validate(); err != nil {
		return FinishGroupLinesResult{}, fmt.Errorf("writing back provider group lines: %w", err)
	}
	var res FinishGroupLinesResult
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, sig *[]string) error {
		res = FinishGroupLinesResult{Finished: map[State][]int64{}}
		var token int64
		var upstream string
		err := tx.QueryRowContext(ctx, `SELECT lease_token, upstream FROM sluice_provider_groups WHERE id = ?`, p.GroupID).Scan(&token, &upstream)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case token != p.Token:
			return ErrLeaseLost
		}
		now := micros(p.Now)
		requeued := false
		for _, l := range p.Lines {
			var jobToken int64
			var done bool
			err := tx.QueryRowContext(ctx, `SELECT job_token, done FROM sluice_provider_group_jobs WHERE group_id = ? AND job_id = ?`,
				p.GroupID, l.JobID).Scan(&jobToken, &done)
			if errors.Is(err, sql.ErrNoRows) {
				return invalid("Lines", "job %d is not in group %s", l.JobID, p.GroupID)
			}
			if err != nil {
				return err
			}
			if done {
				continue
			}
			st, err := sqliteApplyLine(ctx, tx, l, jobToken, p.Now)
			if err != nil {
				return err
			}
			if st != "" {
				res.Finished[st] = append(res.Finished[st], l.JobID)
				requeued = requeued || st == StateQueued
			}
			if e := l.Spend; e != nil && (e.Nanos > 0 || e.Requests > 0) {
				day := e.Day
				if day.IsZero() {
					day = p.Now
				}
				if _, err := tx.ExecContext(ctx, sqliteSpendUpsert, e.Client, spendDay(day), e.Upstream, e.Model, e.Nanos, e.Requests, now); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `UPDATE sluice_provider_group_jobs SET done = 1 WHERE group_id = ? AND job_id = ?`,
				p.GroupID, l.JobID); err != nil {
				return err
			}
			res.Written = append(res.Written, l.JobID)
		}
		if requeued {
			*sig = append(*sig, upstream)
		}
		var open int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sluice_provider_group_jobs WHERE group_id = ? AND done = 0`,
			p.GroupID).Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			res.Ended = true
			_, err := tx.ExecContext(ctx, `UPDATE sluice_provider_groups SET state = 'ended', ended_at = coalesce(ended_at, ?),
				updated_at = ? WHERE id = ?`, now, now, p.GroupID)
			return err
		}
		return nil
	})
	if err != nil {
		return FinishGroupLinesResult{}, fmt.Errorf("writing back provider group %s lines: %w", p.GroupID, err)
	}
	return res, nil
}

// sqliteApplyLine writes one line to its job if the group still holds it
// (token), and returns the state the job went to ("" when it is no longer
// the group's: canceled meanwhile).
func sqliteApplyLine(ctx context.Context, tx sqliteTx, l GroupLine, token int64, at time.Time) (State, error) {
	if l.Fail != nil {
		st, _, _, err := sqliteFailLeased(ctx, tx, l.failParams(token, at))
		return st, err
	}
	now := micros(at)
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
			result_status = ?, result_header = ?, result_body = ?, usage_input = ?, usage_output = ?,
			usage_cache_creation = ?, usage_cache_read = ?, lease_expires_at = NULL, finished_at = ?, updated_at = ?
			WHERE id = ? AND lease_token = ? AND state = 'running'`
		args = []any{r.Status, encodeHeader(r.Header), nonNil(r.Body), r.Usage.InputTokens, r.Usage.OutputTokens,
			r.Usage.CacheCreationInputTokens, r.Usage.CacheReadInputTokens, now, now, l.JobID, token}
	case l.Dead != nil:
		state = StateDead
		var attempts int
		err := tx.QueryRowContext(ctx, `SELECT attempts FROM sluice_jobs WHERE id = ? AND lease_token = ? AND state = 'running'`,
			l.JobID, token).Scan(&attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		e := l.deadError(attempts, at)
		set := ""
		args = []any{string(encodeAttemptError(e)), now, now}
		if r := l.DeadResult; r != nil {
			set = `, result_status = ?, result_header = ?, result_body = ?`
			args = append(args, r.Status, encodeHeader(r.Header), nonNil(r.Body))
		}
		q = `UPDATE sluice_jobs SET state = 'dead', attempts = attempts + 1, errors = json_insert(errors, '$[#]', json(?)),
			lease_expires_at = NULL, finished_at = ?, updated_at = ?` + set + ` WHERE id = ? AND lease_token = ? AND state = 'running'`
		args = append(args, l.JobID, token)
	default:
		state = StateQueued
		q = `UPDATE sluice_jobs SET state = 'queued', available_at = ?, lease_expires_at = NULL, updated_at = ?
			WHERE id = ? AND lease_token = ? AND state = 'running'`
		args = []any{now, now, l.JobID, token}
	}
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return "", err
	}
	if n, _ := r.RowsAffected(); n == 0 {
		return "", nil
	}
	return state, nil
}

// scanGroupCandidates reads the candidates of a group from rows (id,
// bytes, available_at, deadline), closing them.
func scanGroupCandidates(rows *sql.Rows) ([]groupCandidate, error) {
	defer rows.Close()
	var cands []groupCandidate
	for rows.Next() {
		var c groupCandidate
		var avail, dl sql.NullInt64
		if err := rows.Scan(&c.id, &c.bytes, &avail, &dl); err != nil {
			return nil, err
		}
		c.available, c.deadline = fromMicros(avail), fromMicros(dl)
		cands = append(cands, c)
	}
	return cands, rows.Err()
}
