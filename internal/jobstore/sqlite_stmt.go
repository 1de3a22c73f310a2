package jobstore

import (
	"context"
	"database/sql"
)

// sqliteStmtCacheMax bounds the writer's prepared statements. The store's
// statements are a fixed set of texts, except Requeue by ids, whose text
// grows with the id count: that one runs uncached (tx.Tx).
const sqliteStmtCacheMax = 64

// sqliteTx is the group commit's transaction with the writer's prepared
// statements. Parsing statements was most of SQLite's CPU (BENCHMARKS.md,
// "Tuning notes"); the writer is one connection, so each text is prepared
// once and reused by every later transaction.
type sqliteTx struct {
	*sql.Tx
	s *sqliteStore
}

// stmt returns the transaction's handle on q's cached statement, or nil
// when q is not cached yet (the caller runs it unprepared). The writer
// database has one connection, which the transaction holds, so a missing
// statement is only noted here and prepared by prepareNoted after the
// commit.
func (tx sqliteTx) stmt(ctx context.Context, q string) *sql.Stmt {
	st, ok := tx.s.stmts[q]
	if !ok {
		if len(tx.s.stmts)+len(tx.s.toPrepare) < sqliteStmtCacheMax {
			tx.s.toPrepare[q] = struct{}{}
		}
		return nil
	}
	return tx.StmtContext(ctx, st)
}

// prepareNoted prepares the statements stmt noted; the writer connection
// must be free. A statement that fails to prepare stays unprepared.
func (s *sqliteStore) prepareNoted(ctx context.Context) {
	for q := range s.toPrepare {
		if st, err := s.w.PrepareContext(ctx, q); err == nil { //nolint:sqlclosecheck // closed by closeStmts on Close
			s.stmts[q] = st
		}
		delete(s.toPrepare, q)
	}
}

func (tx sqliteTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st := tx.stmt(ctx, q) //nolint:sqlclosecheck // tx-bound statement, closed by the transaction's Commit or Rollback
	if st == nil {
		return tx.Tx.ExecContext(ctx, q, args...)
	}
	return st.ExecContext(ctx, args...)
}

func (tx sqliteTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st := tx.stmt(ctx, q) //nolint:sqlclosecheck // tx-bound statement, closed by the transaction's Commit or Rollback
	if st == nil {
		return tx.Tx.QueryContext(ctx, q, args...)
	}
	return st.QueryContext(ctx, args...)
}

func (tx sqliteTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st := tx.stmt(ctx, q) //nolint:sqlclosecheck // tx-bound statement, closed by the transaction's Commit or Rollback
	if st == nil {
		return tx.Tx.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// closeStmts closes the cached statements; the writer loop has stopped.
func (s *sqliteStore) closeStmts() error {
	var first error
	for q, st := range s.stmts {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.stmts, q)
	}
	return first
}
