package jobstore

import (
	"context"
	"errors"
	"fmt"
)

// SQLiteMaxPagesNone lifts the cap SetSQLiteMaxPages sets (SQLite's own
// ceiling).
const SQLiteMaxPagesNone = 4294967294

// SetSQLiteMaxPages caps a SQLite store's database at pages pages on its
// writer connection (PRAGMA max_page_count); zero caps it at its current
// size, so every write that needs a new page fails as on a full disk
// (SQLITE_FULL, which the store answers as ErrUnavailable), and
// SQLiteMaxPagesNone lifts the cap. It returns the cap now in effect. It is
// how the tests fill the disk; an operator can use it as a quota. Other
// stores answer ErrInvalid.
func SetSQLiteMaxPages(ctx context.Context, st Store, pages int64) (int64, error) {
	s, ok := backend(st).(*sqliteStore)
	if !ok {
		return 0, fmt.Errorf("%w: not a sqlite store", ErrInvalid)
	}
	var got int64
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		if pages == 0 {
			if err := tx.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
				return err
			}
		}
		if pages < 1 {
			return errors.New("pages must be positive")
		}
		return tx.QueryRowContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)).Scan(&got)
	})
	if err != nil {
		return 0, fmt.Errorf("capping the sqlite store: %w", err)
	}
	return got, nil
}
