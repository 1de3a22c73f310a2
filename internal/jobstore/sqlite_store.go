package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteStore is the single-node backend: one writer connection fed by a
// group-commit loop (every write of every caller that arrives while a
// commit is in progress joins the next transaction, each under its own
// savepoint), and a pool of read-only connections. The database runs in
// WAL mode with synchronous=FULL, so a returned write is on disk.
type sqliteStore struct {
	w, r     *sql.DB
	ops      chan *sqliteOp
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	notes    *notifier
	handoffs // Handoff
	max      int
	// The writer's prepared statements, and those to prepare after the
	// current commit; used by the writer loop only.
	stmts     map[string]*sql.Stmt
	toPrepare map[string]struct{}
}

// sqliteOp is one caller's write. fn runs inside the shared transaction
// and adds the upstreams to signal after the commit to *sig.
type sqliteOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx sqliteTx, sig *[]string) error
	res chan error
	// oneWrite: fn writes with a single statement (reads aside), which
	// SQLite undoes by itself when it fails, so it needs no savepoint.
	oneWrite bool
}

func sqliteDSN(path string, opts Options, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

func openSQLiteDB(ctx context.Context, path string, opts Options, readOnly bool, conns int) (*sql.DB, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path, opts, readOnly))
	if err != nil {
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	return db, nil
}

func openSQLite(ctx context.Context, path string, opts Options) (Store, error) {
	w, err := openSQLiteDB(ctx, path, opts, false, 1)
	if err != nil {
		return nil, err
	}
	if err := ensureSchema(ctx, sqliteMigrationConn{w}, dialectSQLite, opts.NoMigrate, opts.Clock.Now()); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("opening sqlite %s: %w", path, err)
	}
	r, err := openSQLiteDB(ctx, path, opts, true, opts.ReadConns)
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	s := &sqliteStore{w: w, r: r, ops: make(chan *sqliteOp), done: make(chan struct{}), notes: newNotifier(), max: opts.GroupCommitMax,
		stmts: map[string]*sql.Stmt{}, toPrepare: map[string]struct{}{}}
	s.wg.Add(1)
	go s.writeLoop()
	return s, nil
}

func (s *sqliteStore) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		s.wg.Wait()
		s.notes.close()
		err = errors.Join(s.closeStmts(), s.w.Close(), s.r.Close())
	})
	return err
}

// write runs fn in the next group commit and waits for the commit.
func (s *sqliteStore) write(ctx context.Context, fn func(ctx context.Context, tx sqliteTx, sig *[]string) error) error {
	return s.enqueue(ctx, &sqliteOp{ctx: ctx, fn: fn, res: make(chan error, 1)})
}

// writeOne is write for an fn whose only write is one statement: a failed
// statement leaves no trace in the transaction (SQLite rolls back the
// statement), so it runs without a savepoint of its own: the savepoint
// pair cost the writer time under single submits.
func (s *sqliteStore) writeOne(ctx context.Context, fn func(ctx context.Context, tx sqliteTx, sig *[]string) error) error {
	return s.enqueue(ctx, &sqliteOp{ctx: ctx, fn: fn, res: make(chan error, 1), oneWrite: true})
}

func (s *sqliteStore) enqueue(ctx context.Context, op *sqliteOp) error {
	select {
	case s.ops <- op:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return <-op.res
}

func (s *sqliteStore) writeLoop() {
	defer s.wg.Done()
	for {
		var first *sqliteOp
		select {
		case first = <-s.ops:
		case <-s.done:
			return
		}
		batch := []*sqliteOp{first}
	drain:
		for len(batch) < s.max {
			select {
			case op := <-s.ops:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		s.commit(batch)
		s.prepareNoted(context.Background())
	}
}

// commit runs a group of writes in one transaction. With one op, a failure
// rolls the transaction back; with several, each op runs under a savepoint
// (unless it writes with one statement only: see writeOne) so one failure
// undoes only its own writes.
func (s *sqliteStore) commit(batch []*sqliteOp) {
	ctx := context.Background()
	results := make([]error, len(batch))
	reply := func() {
		for i, op := range batch {
			op.res <- results[i]
		}
	}
	sqlTx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		for i := range results {
			results[i] = fmt.Errorf("beginning transaction: %w", mapSQLiteErr(err))
		}
		reply()
		return
	}
	tx := sqliteTx{Tx: sqlTx, s: s}
	var signals []string
	single := len(batch) == 1
	for i, op := range batch {
		if err := op.ctx.Err(); err != nil {
			results[i] = context.Cause(op.ctx)
			continue
		}
		savepoint := !single && !op.oneWrite
		if savepoint {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
				results[i] = mapSQLiteErr(err)
				continue
			}
		}
		var sig []string
		// The op's statements run uncancelable: SQLite answers an
		// interrupted INSERT, UPDATE or DELETE inside a transaction by
		// rolling back the whole transaction, the other callers' writes
		// included. A caller that gave up before its turn was skipped above.
		err := op.fn(context.WithoutCancel(op.ctx), tx, &sig)
		results[i] = err
		switch {
		case !savepoint:
		case err != nil:
			_, rbErr := tx.ExecContext(ctx, "ROLLBACK TO op")
			_, relErr := tx.ExecContext(ctx, "RELEASE op")
			if e := errors.Join(rbErr, relErr); e != nil {
				results[i] = errors.Join(err, e)
			}
		default:
			if _, err := tx.ExecContext(ctx, "RELEASE op"); err != nil {
				results[i] = mapSQLiteErr(err)
			}
		}
		if results[i] == nil {
			signals = append(signals, sig...)
		}
	}
	if single && results[0] != nil {
		_ = tx.Rollback()
		reply()
		return
	}
	if err := tx.Commit(); err != nil {
		for i := range results {
			if results[i] == nil {
				results[i] = fmt.Errorf("committing: %w", mapSQLiteErr(err))
			}
		}
		signals = nil
	}
	reply()
	for _, u := range signals {
		s.notes.signal(u)
	}
}

// mapSQLiteErr turns constraint violations into ErrConflict.
func mapSQLiteErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
	}
	return err
}

func (s *sqliteStore) Notify(ctx context.Context, upstream string) <-chan struct{} {
	return s.notes.subscribe(ctx, upstream)
}

// Times are stored as unix microseconds; NULL for a zero time.
func micros(t time.Time) int64 { return storeTime(t).UnixMicro() }

func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: micros(t), Valid: true}
}

func fromMicros(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.UnixMicro(n.Int64).UTC()
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// jobColumns is the column list every job query returns, in scan order.
const jobColumns = `id, idempotency_key, upstream, priority, client, path, body, deadline,
	max_attempts, attempts, stalls, state, available_at, lease_token, lease_owner,
	lease_expires_at, errors, result_status, result_header, result_body, usage_input,
	usage_output, usage_cache_creation, usage_cache_read, batch_id, custom_id,
	webhook_url, created_at, updated_at, finished_at, run_id`

type rowScanner interface{ Scan(dest ...any) error }

func scanSQLiteJob(row rowScanner) (*Job, error) {
	var (
		j                                         Job
		key, batch, custom, run                   sql.NullString
		deadline, avail, lease, created, upd, fin sql.NullInt64
		state                                     string
		errs                                      []byte
		status                                    sql.NullInt64
		header, body                              []byte
		usage                                     [4]int64
	)
	err := row.Scan(&j.ID, &key, &j.Upstream, &j.Priority, &j.Client, &j.Path, &j.Body, &deadline,
		&j.MaxAttempts, &j.Attempts, &j.Stalls, &state, &avail, &j.Lease.Token, &j.Lease.Owner,
		&lease, &errs, &status, &header, &body, &usage[0], &usage[1], &usage[2], &usage[3],
		&batch, &custom, &j.WebhookURL, &created, &upd, &fin, &run)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("reading job: %w", err)
	}
	j.IdempotencyKey, j.BatchID, j.CustomID, j.RunID = key.String, batch.String, custom.String, run.String
	j.State = State(state)
	j.Deadline, j.AvailableAt, j.Lease.ExpiresAt = fromMicros(deadline), fromMicros(avail), fromMicros(lease)
	j.CreatedAt, j.UpdatedAt, j.FinishedAt = fromMicros(created), fromMicros(upd), fromMicros(fin)
	if j.Errors, err = decodeAttemptErrors(errs); err != nil {
		return nil, err
	}
	if status.Valid {
		h, err := decodeHeader(header)
		if err != nil {
			return nil, err
		}
		if body == nil {
			body = []byte{}
		}
		j.Result = &Result{Status: int(status.Int64), Header: h, Body: body}
		j.Result.Usage.InputTokens, j.Result.Usage.OutputTokens = usage[0], usage[1]
		j.Result.Usage.CacheCreationInputTokens, j.Result.Usage.CacheReadInputTokens = usage[2], usage[3]
	}
	if j.Body == nil {
		j.Body = []byte{}
	}
	return &j, nil
}

func collectSQLiteJobs(rows *sql.Rows) ([]*Job, error) {
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanSQLiteJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading jobs: %w", err)
	}
	return out, nil
}

// placeholders returns "?,?,…" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// sqliteMigrationConn runs migrations on the writer connection.
type sqliteMigrationConn struct{ db *sql.DB }

func openSQLiteMigrationConn(ctx context.Context, path string, opts Options) (migrationConn, error) {
	db, err := openSQLiteDB(ctx, path, opts, false, 1)
	if err != nil {
		return nil, err
	}
	return sqliteMigrationConn{db}, nil
}

func (c sqliteMigrationConn) close() error { return c.db.Close() }

func (c sqliteMigrationConn) applied(ctx context.Context) ([]AppliedMigration, error) {
	if _, err := c.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return nil, fmt.Errorf("creating version table: %w", err)
	}
	rows, err := c.db.QueryContext(ctx, `SELECT version, name, applied_at FROM sluice_schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("reading version table: %w", err)
	}
	defer rows.Close()
	var out []AppliedMigration
	for rows.Next() {
		var m AppliedMigration
		var at sql.NullInt64
		if err := rows.Scan(&m.Version, &m.Name, &at); err != nil {
			return nil, fmt.Errorf("reading version table: %w", err)
		}
		m.AppliedAt = fromMicros(at)
		out = append(out, m)
	}
	return out, rows.Err()
}

func (c sqliteMigrationConn) apply(ctx context.Context, m migration, up bool, now time.Time) error {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	script, record, args := m.Down, `DELETE FROM sluice_schema_migrations WHERE version = ?`, []any{m.Version}
	if up {
		script = m.Up
		record = `INSERT INTO sluice_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
		args = []any{m.Version, m.Name, micros(now)}
	}
	if _, err := tx.ExecContext(ctx, script); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, record, args...); err != nil {
		return err
	}
	return tx.Commit()
}
