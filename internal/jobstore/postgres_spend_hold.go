package jobstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// A write of spend holds is one batch (one round trip, one implicit
// transaction) of at most three statements, whatever the number of holds:
// the opens and the settlements go as arrays.
const (
	pgHoldOpen = `INSERT INTO sluice_spend_holds (owner, seq, client, upstream, model, nanos, lease_until, created_at)
	SELECT $1, seq, client, upstream, model, nanos, $2, $3
	FROM unnest($4::bigint[], $5::text[], $6::text[], $7::text[], $8::bigint[]) AS o(seq, client, upstream, model, nanos)
	ON CONFLICT (owner, seq) DO NOTHING`
	// The settled holds are deleted (looked up by key: a join on the
	// owner's holds walked every dead entry the owner had left in the
	// index) and their costs added to the spend of the holds that were
	// still open, in a fixed order (two gateways adding to the same rows
	// lock them in the same order).
	pgHoldSettle = `WITH s AS (
		SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::text[]) AS s(seq, nanos, day)
	), d AS (
		DELETE FROM sluice_spend_holds WHERE owner = $1 AND seq = ANY($2::bigint[])
		RETURNING seq, client, upstream, model
	)
	INSERT INTO sluice_spend (client, day, upstream, model, nanos, requests, updated_at)
	SELECT d.client, s.day, d.upstream, d.model, sum(s.nanos), count(*), $5 FROM d JOIN s USING (seq) WHERE s.nanos > 0
	GROUP BY d.client, s.day, d.upstream, d.model ORDER BY d.client, s.day, d.upstream, d.model
	ON CONFLICT (client, day, upstream, model) DO UPDATE SET
		nanos = sluice_spend.nanos + excluded.nanos,
		requests = sluice_spend.requests + excluded.requests,
		updated_at = excluded.updated_at`
	pgHoldRenew  = `UPDATE sluice_spend_holds SET lease_until = $2 WHERE owner = $1`
	pgHoldSelect = `SELECT owner, seq, client, upstream, model, nanos, lease_until, created_at
	FROM sluice_spend_holds ORDER BY owner, seq`
	// A reap of all the holds ends every lease at infinity: one statement,
	// on the lease index either way.
	pgHoldReap = `WITH d AS (
		DELETE FROM sluice_spend_holds WHERE lease_until <= $2 AND owner <> $1
		RETURNING client, upstream, model, nanos
	), s AS (
		SELECT client, upstream, model, sum(nanos)::bigint AS nanos, count(*) AS requests
		FROM d GROUP BY client, upstream, model
	), i AS (
		INSERT INTO sluice_spend (client, day, upstream, model, nanos, requests, updated_at)
		SELECT client, $4, upstream, model, nanos, requests, $3 FROM s ORDER BY client, upstream, model
		ON CONFLICT (client, day, upstream, model) DO UPDATE SET
			nanos = sluice_spend.nanos + excluded.nanos,
			requests = sluice_spend.requests + excluded.requests,
			updated_at = excluded.updated_at
	)
	SELECT client, upstream, model, nanos, requests FROM s ORDER BY client, upstream, model`
)

func (s *postgresStore) WriteSpendHolds(ctx context.Context, p WriteSpendHoldsParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("writing spend holds: %w", err)
	}
	b := &pgx.Batch{}
	if n := len(p.Open); n > 0 {
		seq, nanos := make([]int64, n), make([]int64, n)
		client, upstream, model := make([]string, n), make([]string, n), make([]string, n)
		for i, h := range p.Open {
			seq[i], client[i], upstream[i], model[i], nanos[i] = h.Seq, h.Client, h.Upstream, h.Model, h.Nanos
		}
		b.Queue(pgHoldOpen, p.Owner, pgTime(p.LeaseUntil), pgTime(p.Now), seq, client, upstream, model, nanos)
	}
	if n := len(p.Settle); n > 0 {
		seq, nanos, day := make([]int64, n), make([]int64, n), make([]string, n)
		for i, st := range p.Settle {
			seq[i], nanos[i], day[i] = st.Seq, st.Nanos, spendDay(st.Day)
		}
		b.Queue(pgHoldSettle, p.Owner, seq, nanos, day, pgTime(p.Now))
	}
	if p.Renew {
		b.Queue(pgHoldRenew, p.Owner, pgTime(p.LeaseUntil))
	}
	if b.Len() == 0 {
		return nil
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("writing spend holds: %w", err)
	}
	return nil
}

func (s *postgresStore) SpendHolds(ctx context.Context, _ SpendHoldsParams) ([]SpendHold, error) {
	rows, err := s.pool.Query(ctx, pgHoldSelect)
	if err != nil {
		return nil, fmt.Errorf("reading spend holds: %w", err)
	}
	type row struct {
		Owner                   string
		Seq                     int64
		Client, Upstream, Model string
		Nanos                   int64
		LeaseUntil, CreatedAt   pgtype.Timestamptz
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("reading spend holds: %w", err)
	}
	out := make([]SpendHold, 0, len(got))
	for _, r := range got {
		out = append(out, SpendHold{Owner: r.Owner, Seq: r.Seq, Client: r.Client, Upstream: r.Upstream, Model: r.Model,
			Nanos: r.Nanos, LeaseUntil: fromPgTime(r.LeaseUntil), CreatedAt: fromPgTime(r.CreatedAt)})
	}
	return out, nil
}

func (s *postgresStore) ReapSpendHolds(ctx context.Context, p ReapSpendHoldsParams) ([]SpendEntry, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("reaping spend holds: %w", err)
	}
	ended := pgTime(p.Now)
	if p.All {
		ended = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	rows, err := s.pool.Query(ctx, pgHoldReap, p.Except, ended, pgTime(p.Now), spendDay(p.Now))
	if err != nil {
		return nil, fmt.Errorf("reaping spend holds: %w", err)
	}
	type row struct {
		Client, Upstream, Model string
		Nanos, Requests         int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("reaping spend holds: %w", err)
	}
	out := make([]SpendEntry, 0, len(got))
	for _, r := range got {
		out = append(out, SpendEntry{Client: r.Client, Upstream: r.Upstream, Model: r.Model, Day: spendDayOf(p.Now),
			Nanos: r.Nanos, Requests: r.Requests})
	}
	return out, nil
}
