package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// scanBatchIDs reads a column of batch ids and closes rows.
func scanBatchIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("listing batches: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	return ids, nil
}

// getBatches loads each listed batch with its counts; a batch deleted
// since it was listed (retention) is left out.
func getBatches(ctx context.Context, s Store, ids []string) ([]*Batch, error) {
	out := make([]*Batch, 0, len(ids))
	for _, id := range ids {
		b, err := s.GetBatch(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
