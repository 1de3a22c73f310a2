package jobstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

var (
	pgSpendUpsert = fmt.Sprintf(spendUpsert, "$1", "$2", "$3", "$4", "$5", "$6", "$7")
	pgSpendSelect = fmt.Sprintf(spendSelect, "$1")
)

func (s *postgresStore) AddSpend(ctx context.Context, p AddSpendParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("adding spend: %w", err)
	}
	if len(p.Entries) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, e := range p.Entries {
			b.Queue(pgSpendUpsert, e.Client, spendDay(e.Day), e.Upstream, e.Model, e.Nanos, e.Requests, pgTime(p.Now))
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("adding spend: %w", err)
	}
	return nil
}

func (s *postgresStore) Spend(ctx context.Context, p SpendParams) ([]SpendEntry, error) {
	rows, err := s.pool.Query(ctx, pgSpendSelect, p.sinceDay())
	if err != nil {
		return nil, fmt.Errorf("reading spend: %w", err)
	}
	type row struct {
		Client, Day, Upstream, Model string
		Nanos, Requests              int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("reading spend: %w", err)
	}
	out := make([]SpendEntry, 0, len(got))
	for _, r := range got {
		day, err := parseSpendDay(r.Day)
		if err != nil {
			return nil, fmt.Errorf("reading spend: day %q: %w", r.Day, err)
		}
		out = append(out, SpendEntry{Client: r.Client, Day: day, Upstream: r.Upstream, Model: r.Model, Nanos: r.Nanos, Requests: r.Requests})
	}
	return out, nil
}
