package jobstore

import (
	"context"
	"fmt"
)

const spendUpsert = `INSERT INTO sluice_spend (client, day, upstream, model, nanos, requests, updated_at)
	VALUES (%[1]s, %[2]s, %[3]s, %[4]s, %[5]s, %[6]s, %[7]s)
	ON CONFLICT (client, day, upstream, model) DO UPDATE SET
		nanos = sluice_spend.nanos + excluded.nanos,
		requests = sluice_spend.requests + excluded.requests,
		updated_at = excluded.updated_at`

const spendSelect = `SELECT client, day, upstream, model, nanos, requests FROM sluice_spend
	WHERE day >= %s ORDER BY client, day, upstream, model`

var (
	sqliteSpendUpsert = fmt.Sprintf(spendUpsert, "?", "?", "?", "?", "?", "?", "?")
	sqliteSpendSelect = fmt.Sprintf(spendSelect, "?")
)

func (s *sqliteStore) AddSpend(ctx context.Context, p AddSpendParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("adding spend: %w", err)
	}
	if len(p.Entries) == 0 {
		return nil
	}
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		for _, e := range p.Entries {
			if _, err := tx.ExecContext(ctx, sqliteSpendUpsert, e.Client, spendDay(e.Day), e.Upstream, e.Model,
				e.Nanos, e.Requests, micros(p.Now)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("adding spend: %w", err)
	}
	return nil
}

func (s *sqliteStore) Spend(ctx context.Context, p SpendParams) ([]SpendEntry, error) {
	rows, err := s.r.QueryContext(ctx, sqliteSpendSelect, p.sinceDay())
	if err != nil {
		return nil, fmt.Errorf("reading spend: %w", err)
	}
	defer rows.Close()
	var out []SpendEntry
	for rows.Next() {
		var e SpendEntry
		var day string
		if err := rows.Scan(&e.Client, &day, &e.Upstream, &e.Model, &e.Nanos, &e.Requests); err != nil {
			return nil, fmt.Errorf("reading spend: %w", err)
		}
		if e.Day, err = parseSpendDay(day); err != nil {
			return nil, fmt.Errorf("reading spend: day %q: %w", day, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading spend: %w", err)
	}
	return out, nil
}
