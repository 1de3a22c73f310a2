package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// postgresStore is the multi-node backend on a pgx pool. Claims lease a
// batch of jobs in one UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE
// SKIP LOCKED)) statement, so concurrent claimers never get the same job. Work
// signals travel by LISTEN/NOTIFY on the channel notifyChannel; when the
// listener connection is down, subscribers are woken every PollInterval.
type postgresStore struct {
	pool     *pgxpool.Pool
	notes    *notifier
	handoffs // Handoff
	opts     Options
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once

	inserts   *groupCommit[InsertParams, InsertResult]
	completes *groupCommit[CompleteParams, struct{}]

	notifyMu   sync.Mutex
	notified   map[string]time.Time // last insert NOTIFY per upstream
	lateNotify map[string]bool      // upstreams trailingNotify owes a NOTIFY
	notifyKick chan struct{}
}

// notifyChannel is the LISTEN/NOTIFY channel; the payload is the upstream.
const notifyChannel = "sluice_jobs"

// notifyCooldown is the least time between two insert NOTIFYs of one
// upstream from one store (see notifyDue).
const notifyCooldown = 2 * time.Millisecond

func newPgPool(ctx context.Context, dsn string, opts Options) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing postgres address: %w", err)
	}
	cfg.MaxConns = int32(opts.MaxConns)
	// Every statement here is meant to run on an index. pgx prepares each
	// statement once per connection, and PostgreSQL soon settles on a
	// generic plan; made while a fresh queue's table was nearly empty, that
	// plan kept sequential scans for the claim and the completion for as
	// long as the connection lived (until autovacuum's first ANALYZE). With
	// sequential scans priced out, cached plans stay on the indexes and
	// nothing is planned twice (planning each execution instead was a
	// large share of PostgreSQL's time under single submits; BENCHMARKS.md,
	// "Tuning notes").
	//
	// Generic plans are also forced: PostgreSQL otherwise compares a
	// generic plan's cost with the custom plans' and kept planning the
	// group insert afresh on every execution (its custom plan knows how
	// many rows the arrays hold, so for small groups it looks cheaper),
	// which spent the machine's time on planning it. A generic
	// plan lives as long as its connection, so each statement here must
	// have one good plan whatever the values and table size: sequential
	// scans are priced out above, and migration 0003 keeps lookups by id
	// off the lease index, which an empty table's plans otherwise chose
	// (TestPostgresFencedLookupsProbePrimaryKey). List, whose filters vary,
	// is planned per call (simple protocol). A DSN that sets either
	// parameter keeps its own choice.
	for k, v := range map[string]string{"enable_seqscan": "off", "plan_cache_mode": "force_generic_plan"} {
		if _, ok := cfg.ConnConfig.RuntimeParams[k]; !ok {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	return pool, nil
}

func openPostgres(ctx context.Context, dsn string, opts Options) (Store, error) {
	pool, err := newPgPool(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	if err := ensureSchema(ctx, pgMigrationConn{pool}, dialectPostgres, opts.NoMigrate, opts.Clock.Now()); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	s := &postgresStore{pool: pool, notes: newNotifier(), opts: opts, cancel: cancel,
		notified: map[string]time.Time{}, lateNotify: map[string]bool{}, notifyKick: make(chan struct{}, 1)}
	s.inserts = newGroupCommit(pgFlushers, opts.GroupCommitMax, pgInsertParallelMin, s.flushInserts)
	s.completes = newGroupCommit(pgFlushers, opts.GroupCommitMax, pgCompleteParallelMin, s.flushCompletes)
	s.wg.Add(2)
	go s.listen(lctx)
	go s.trailingNotify(lctx)
	return s, nil
}

func (s *postgresStore) Close() error {
	s.once.Do(func() {
		s.inserts.close()
		s.completes.close()
		s.cancel()
		s.wg.Wait()
		s.notes.close()
		s.pool.Close()
	})
	return nil
}

// listen relays NOTIFYs to local subscribers. While it has no listening
// connection it wakes everyone every PollInterval instead.
func (s *postgresStore) listen(ctx context.Context) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		_ = err // the poll below is the fallback; the next loop retries LISTEN
		s.notes.signal("")
		if clockSleep(ctx, s.opts, s.opts.PollInterval) != nil {
			return
		}
	}
}

func (s *postgresStore) listenOnce(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	defer func() {
		// The connection goes back to the pool: stop listening first.
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "UNLISTEN *"); err != nil {
			conn.Conn().Close(uctx)
		}
	}()
	// Missed signals while connecting are covered by one wake-up.
	s.notes.signal("")
	for {
		wctx, cancel := context.WithTimeout(ctx, s.opts.PollInterval)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			s.notes.signal(n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Poll tick: jobs scheduled for later become available without a
			// NOTIFY, so wake everyone now and then.
			s.notes.signal("")
		default:
			return err
		}
	}
}

func (s *postgresStore) Notify(ctx context.Context, upstream string) <-chan struct{} {
	return s.notes.subscribe(ctx, upstream)
}

// mapPgErr turns unique violations into ErrConflict and no rows into
// ErrNotFound.
func mapPgErr(err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case errors.As(err, &pe) && pe.Code == "23505":
		return fmt.Errorf("%w: %s", ErrConflict, pe.Message)
	}
	return err
}

func pgTime(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: storeTime(t), Valid: true}
}

func fromPgTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func pgText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// pgJobScan holds the scan targets of one job row. Every target passed to
// Scan escapes to the heap through its ...any, so scanning into locals
// made an allocation per target and row; collectPgJobs reuses one
// pgJobScan for all its rows, and each row then costs its Job and the
// values it holds.
type pgJobScan struct {
	j                                         Job
	key, batch, custom, run                   pgtype.Text
	deadline, avail, lease, created, upd, fin pgtype.Timestamptz
	state                                     string
	priority                                  int16
	body, errs, header, resultBody            []byte // pgx copies each bytea it scans
	status                                    pgtype.Int4
	usage                                     [4]int64
	dest                                      []any
}

func newPgJobScan() *pgJobScan {
	sc := &pgJobScan{}
	j := &sc.j
	sc.dest = []any{&j.ID, &sc.key, &j.Upstream, &sc.priority, &j.Client, &j.Path, &sc.body, &sc.deadline,
		&j.MaxAttempts, &j.Attempts, &j.Stalls, &sc.state, &sc.avail, &j.Lease.Token, &j.Lease.Owner,
		&sc.lease, &sc.errs, &sc.status, &sc.header, &sc.resultBody, &sc.usage[0], &sc.usage[1], &sc.usage[2], &sc.usage[3],
		&sc.batch, &sc.custom, &j.WebhookURL, &sc.created, &sc.upd, &sc.fin, &sc.run}
	return sc
}

func scanPgJob(row pgx.Row) (*Job, error) { return newPgJobScan().scan(row) }

// scan reads one row into a new Job.
func (sc *pgJobScan) scan(row pgx.Row) (*Job, error) {
	sc.j = Job{}
	if err := row.Scan(sc.dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading job: %w", err)
	}
	j := sc.j
	j.Body = nonNil(sc.body)
	j.Priority = priorityOf(sc.priority)
	j.IdempotencyKey, j.BatchID, j.CustomID, j.RunID = sc.key.String, sc.batch.String, sc.custom.String, sc.run.String
	j.State = State(sc.state)
	j.Deadline, j.AvailableAt, j.Lease.ExpiresAt = fromPgTime(sc.deadline), fromPgTime(sc.avail), fromPgTime(sc.lease)
	j.CreatedAt, j.UpdatedAt, j.FinishedAt = fromPgTime(sc.created), fromPgTime(sc.upd), fromPgTime(sc.fin)
	var err error
	if j.Errors, err = decodeAttemptErrors(sc.errs); err != nil {
		return nil, err
	}
	if sc.status.Valid {
		h, err := decodeHeader(sc.header)
		if err != nil {
			return nil, err
		}
		j.Result = &Result{Status: int(sc.status.Int32), Header: h, Body: nonNil(sc.resultBody)}
		j.Result.Usage.InputTokens, j.Result.Usage.OutputTokens = sc.usage[0], sc.usage[1]
		j.Result.Usage.CacheCreationInputTokens, j.Result.Usage.CacheReadInputTokens = sc.usage[2], sc.usage[3]
	}
	return &j, nil
}

func collectPgJobs(rows pgx.Rows) ([]*Job, error) {
	defer rows.Close()
	var out []*Job
	sc := newPgJobScan()
	for rows.Next() {
		j, err := sc.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading jobs: %w", mapPgErr(err))
	}
	return out, nil
}

// pgMigrationConn runs migrations under an advisory lock, so nodes starting
// together migrate once.
type pgMigrationConn struct{ pool *pgxpool.Pool }

func openPostgresMigrationConn(ctx context.Context, dsn string, opts Options) (migrationConn, error) {
	pool, err := newPgPool(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	return pgMigrationConn{pool}, nil
}

func (c pgMigrationConn) close() error { c.pool.Close(); return nil }

func (c pgMigrationConn) applied(ctx context.Context) ([]AppliedMigration, error) {
	if _, err := c.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`); err != nil {
		if !isDuplicateRace(err) {
			return nil, fmt.Errorf("creating version table: %w", err)
		}
	}
	rows, err := c.pool.Query(ctx, `SELECT version, name, applied_at FROM sluice_schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("reading version table: %w", err)
	}
	defer rows.Close()
	var out []AppliedMigration
	for rows.Next() {
		var m AppliedMigration
		var at pgtype.Timestamptz
		if err := rows.Scan(&m.Version, &m.Name, &at); err != nil {
			return nil, fmt.Errorf("reading version table: %w", err)
		}
		m.AppliedAt = fromPgTime(at)
		out = append(out, m)
	}
	return out, rows.Err()
}

// isDuplicateRace reports the error two concurrent CREATE TABLE IF NOT
// EXISTS can raise.
func isDuplicateRace(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07")
}

func (c pgMigrationConn) apply(ctx context.Context, m migration, up bool, now time.Time) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('sluice_schema_migrations'))`); err != nil {
		return err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sluice_schema_migrations WHERE version = $1)`, m.Version).Scan(&exists); err != nil {
		return err
	}
	if exists != up {
		script := m.Down
		record := `DELETE FROM sluice_schema_migrations WHERE version = $1`
		args := []any{m.Version}
		if up {
			script = m.Up
			record = `INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`
			args = []any{m.Version, m.Name, pgTime(now)}
		}
		if _, err := tx.Exec(ctx, script); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, record, args...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
