package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

const (
	sqliteHoldOpen = `INSERT INTO sluice_spend_holds (owner, seq, client, upstream, model, nanos, lease_until, created_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (owner, seq) DO NOTHING`
	sqliteHoldDelete = `DELETE FROM sluice_spend_holds WHERE owner = ? AND seq = ? RETURNING client, upstream, model`
	sqliteHoldRenew  = `UPDATE sluice_spend_holds SET lease_until = ? WHERE owner = ?`
	sqliteHoldSelect = `SELECT owner, seq, client, upstream, model, nanos, lease_until, created_at
	FROM sluice_spend_holds ORDER BY owner, seq`
	// The holds a reap takes: every owner's but the caller's (?1), all
	// of them (?2) or those whose lease ended by now (?3).
	sqliteHoldReaped  = `owner <> ?1 AND (?2 OR lease_until <= ?3)`
	sqliteHoldReapSum = `SELECT client, upstream, model, sum(nanos), count(*) FROM sluice_spend_holds
	WHERE ` + sqliteHoldReaped + ` GROUP BY client, upstream, model ORDER BY client, upstream, model`
	sqliteHoldReapDelete = `DELETE FROM sluice_spend_holds WHERE ` + sqliteHoldReaped
)

func (s *sqliteStore) WriteSpendHolds(ctx context.Context, p WriteSpendHoldsParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("writing spend holds: %w", err)
	}
	if len(p.Open) == 0 && len(p.Settle) == 0 && !p.Renew {
		return nil
	}
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		for _, h := range p.Open {
			if _, err := tx.ExecContext(ctx, sqliteHoldOpen, p.Owner, h.Seq, h.Client, h.Upstream, h.Model, h.Nanos,
				micros(p.LeaseUntil), micros(p.Now)); err != nil {
				return err
			}
		}
		for _, st := range p.Settle {
			var e SpendEntry
			err := tx.QueryRowContext(ctx, sqliteHoldDelete, p.Owner, st.Seq).Scan(&e.Client, &e.Upstream, &e.Model)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				continue // settled or reaped already: counted
			case err != nil:
				return err
			case st.Nanos == 0:
				continue // a refund
			}
			if _, err := tx.ExecContext(ctx, sqliteSpendUpsert, e.Client, spendDay(st.Day), e.Upstream, e.Model,
				st.Nanos, 1, micros(p.Now)); err != nil {
				return err
			}
		}
		if p.Renew {
			if _, err := tx.ExecContext(ctx, sqliteHoldRenew, micros(p.LeaseUntil), p.Owner); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing spend holds: %w", err)
	}
	return nil
}

func (s *sqliteStore) SpendHolds(ctx context.Context, _ SpendHoldsParams) ([]SpendHold, error) {
	rows, err := s.r.QueryContext(ctx, sqliteHoldSelect)
	if err != nil {
		return nil, fmt.Errorf("reading spend holds: %w", err)
	}
	defer rows.Close()
	var out []SpendHold
	for rows.Next() {
		var h SpendHold
		var lease, created sql.NullInt64
		if err := rows.Scan(&h.Owner, &h.Seq, &h.Client, &h.Upstream, &h.Model, &h.Nanos, &lease, &created); err != nil {
			return nil, fmt.Errorf("reading spend holds: %w", err)
		}
		h.LeaseUntil, h.CreatedAt = fromMicros(lease), fromMicros(created)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading spend holds: %w", err)
	}
	return out, nil
}

func (s *sqliteStore) ReapSpendHolds(ctx context.Context, p ReapSpendHoldsParams) ([]SpendEntry, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("reaping spend holds: %w", err)
	}
	var out []SpendEntry
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		args := []any{p.Except, p.All, micros(p.Now)}
		var err error
		if out, err = sqliteReaped(ctx, tx, args, spendDayOf(p.Now)); err != nil || len(out) == 0 {
			return err
		}
		if _, err := tx.ExecContext(ctx, sqliteHoldReapDelete, args...); err != nil {
			return err
		}
		for _, e := range out {
			if _, err := tx.ExecContext(ctx, sqliteSpendUpsert, e.Client, spendDay(e.Day), e.Upstream, e.Model,
				e.Nanos, e.Requests, micros(p.Now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reaping spend holds: %w", err)
	}
	return out, nil
}

// sqliteReaped sums the holds a reap takes, per client, upstream and
// model, charged on day.
func sqliteReaped(ctx context.Context, tx sqliteTx, args []any, day time.Time) ([]SpendEntry, error) {
	rows, err := tx.QueryContext(ctx, sqliteHoldReapSum, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []SpendEntry
	for rows.Next() {
		e := SpendEntry{Day: day}
		if err := rows.Scan(&e.Client, &e.Upstream, &e.Model, &e.Nanos, &e.Requests); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
