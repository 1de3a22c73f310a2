package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
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

func (p ListBatchesParams) validate() error {
	if p.After != "" && p.Before != "" {
		return invalid("Before", "set After or Before, not both")
	}
	return nil
}

// cursor is the batch id the page starts from, the comparison of
// (created_at, id) with it, and the order to read in: a page before a
// batch is read oldest first from it, then turned (newestFirst).
func (p ListBatchesParams) cursor() (id, cmp, order string) {
	if p.Before != "" {
		return p.Before, ">", "ASC"
	}
	return p.After, "<", "DESC"
}

// newestFirst returns ids, read in cursor's order, newest first.
func (p ListBatchesParams) newestFirst(ids []string) []string {
	if p.Before != "" {
		slices.Reverse(ids)
	}
	return ids
}

// newBatch is the batch CreateBatch just inserted, every job queued.
func newBatch(p CreateBatchParams, now time.Time) *Batch {
	b := &Batch{ID: p.ID, Format: p.Format, Client: p.Client, Total: len(p.Jobs), CreatedAt: now, Upstream: p.Upstream, Attrs: p.Attrs,
		WebhookURL: p.WebhookURL}
	for _, j := range p.Jobs {
		if j.Dead != nil {
			b.Counts.Dead++
		} else {
			b.Counts.Queued++
		}
	}
	if !p.KeepUntil.IsZero() {
		b.KeepUntil = storeTime(p.KeepUntil)
	}
	last := time.Time{}
	if b.Counts.Dead > 0 {
		last = now // its dead jobs finished as it was made
	}
	b.setEnded(last)
	return b
}

// setEnded sets EndedAt from the latest finish of its jobs, once the
// counts say every job has finished.
func (b *Batch) setEnded(lastFinish time.Time) {
	switch {
	case !b.Ended():
		b.EndedAt = time.Time{}
	case lastFinish.IsZero():
		b.EndedAt = b.CreatedAt // no job: ended when created
	default:
		b.EndedAt = lastFinish
	}
}
