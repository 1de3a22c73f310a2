package jobstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// PlannedStatement is a statement and sample arguments, for plan tests.
type PlannedStatement struct {
	SQL  string
	Args []any
}

// SpendHoldStatements are the PostgreSQL spend hold statements, by name.
func SpendHoldStatements(now time.Time) map[string]PlannedStatement {
	ts := pgTime(now)
	inf := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	return map[string]PlannedStatement{
		"open":     {pgHoldOpen, []any{"a", ts, ts, []int64{1}, []string{"c"}, []string{"u"}, []string{"m"}, []int64{5}}},
		"settle":   {pgHoldSettle, []any{"a", []int64{1}, []int64{3}, []string{"2026-03-01"}, ts}},
		"renew":    {pgHoldRenew, []any{"a", ts}},
		"read":     {pgHoldSelect, nil},
		"reap":     {pgHoldReap, []any{"a", ts, ts, "2026-03-01"}},
		"reap all": {pgHoldReap, []any{"a", inf, ts, "2026-03-01"}},
	}
}
