package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The bare pattern: what a client with no overhead of its own gets from
// the two row writes every job needs, on Sluice's own table and indexes.
// bareLoops connections each claim bareBatch queued rows in one
// UPDATE … WHERE ctid = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED)) and
// complete them all in one UPDATE … FROM unnest, in a loop: no per-job
// goroutine, no group commit, no handoff, no lease bookkeeping. It is not
// a job queue (a job runs only once its whole batch is claimed, and a slow
// job would hold up its batch); it is the ceiling that Sluice's store is
// measured against, in the same run as River. bare-postgres-claims is the
// loop without the completions: the "bare SKIP LOCKED loop"
// reference (its figures: docs/jobs.md, "Performance").
const (
	bareLoops = 2
	bareBatch = 100
)

const bareClaim = `UPDATE sluice_jobs SET state = 'running', lease_token = lease_token + 1, lease_owner = 'bare',
	lease_expires_at = $1, updated_at = $2
	WHERE ctid = ANY(ARRAY(SELECT ctid FROM sluice_jobs WHERE state = 'queued' AND upstream = 'a' AND available_at <= $2
		ORDER BY priority, available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED))
	RETURNING id, lease_token`

const bareComplete = `UPDATE sluice_jobs j SET state = 'succeeded', attempts = j.attempts + 1, result_status = 200,
	result_body = '\x7b7d', lease_expires_at = NULL, finished_at = $3, updated_at = $3
	FROM unnest($1::bigint[], $2::bigint[]) AS u(id, tk)
	WHERE j.id = u.id AND j.lease_token = u.tk AND j.state = 'running'`

// bareSystem fills through a Sluice store (the same rows as
// sluice-postgres) and works through its own pool.
type bareSystem struct {
	*sluiceSystem
	claimsOnly bool // count a job done once claimed; complete nothing
	pool       *pgxpool.Pool
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	errMu      sync.Mutex
	err        error // the first failure of a loop, returned by close
}

func openBarePostgres(ctx context.Context, cfg config) (system, error) {
	s, err := openSluicePostgres(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.postgres)
	if err != nil {
		return nil, errors.Join(err, s.close())
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = sluiceSchema
	pcfg.MaxConns = bareLoops
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, errors.Join(err, s.close())
	}
	return &bareSystem{sluiceSystem: s.(*sluiceSystem), pool: pool}, nil
}

// bareClaimsOnly opens the bare pattern without its completions.
func bareClaimsOnly(ctx context.Context, cfg config) (system, error) {
	s, err := openBarePostgres(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.(*bareSystem).claimsOnly = true
	return s, nil
}

func (b *bareSystem) start(_ context.Context, started, done func()) error {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	for range bareLoops {
		b.wg.Go(func() { b.loop(ctx, started, done) })
	}
	return nil
}

// fail records a loop's failure (a drain then stalls: the cause is printed
// at once and returned by close).
func (b *bareSystem) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping: the run is over
	}
	fmt.Fprintln(os.Stderr, "bare-postgres:", err)
	b.errMu.Lock()
	defer b.errMu.Unlock()
	if b.err == nil {
		b.err = err
	}
}

func (b *bareSystem) loop(ctx context.Context, started, done func()) {
	ids, tokens := make([]int64, 0, bareBatch), make([]int64, 0, bareBatch)
	for ctx.Err() == nil {
		now := time.Now()
		rows, err := b.pool.Query(ctx, bareClaim, now.Add(time.Minute), now, bareBatch)
		if err != nil {
			b.fail(ctx, fmt.Errorf("claiming: %w", err))
			return
		}
		ids, tokens = ids[:0], tokens[:0]
		var id, tk int64
		_, err = pgx.ForEachRow(rows, []any{&id, &tk}, func() error {
			ids, tokens = append(ids, id), append(tokens, tk)
			started()
			return nil
		})
		if err != nil {
			b.fail(ctx, fmt.Errorf("claiming: %w", err))
			return
		}
		if len(ids) > 0 && b.claimsOnly {
			for range ids {
				done()
			}
			continue
		}
		if len(ids) == 0 {
			select { // idle: the drain is over, or nothing is queued yet
			case <-ctx.Done():
				return
			case <-time.After(riverFetchPollInterval):
			}
			continue
		}
		tag, err := b.pool.Exec(ctx, bareComplete, ids, tokens, time.Now())
		if err != nil {
			b.fail(ctx, fmt.Errorf("completing: %w", err))
			return
		}
		if tag.RowsAffected() != int64(len(ids)) {
			b.fail(ctx, fmt.Errorf("completed %d of %d claimed jobs", tag.RowsAffected(), len(ids)))
			return
		}
		for range ids {
			done()
		}
	}
}

func (b *bareSystem) close() error {
	if b.cancel != nil {
		b.cancel()
	}
	b.wg.Wait()
	b.pool.Close()
	return errors.Join(b.err, b.sluiceSystem.close())
}
