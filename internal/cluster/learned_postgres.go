package cluster

import (
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice/internal/flow"
)

// pgLearnedSchema holds the provider reports the nodes share
// (learned.go): one row per key, account and dimension, not tied to any
// lease, so a report outlives the node that made it.
const pgLearnedSchema = `
CREATE TABLE IF NOT EXISTS sluice_cluster_learned (
	key            text NOT NULL,
	account        text NOT NULL,
	dim            integer NOT NULL,
	limit_value    double precision NOT NULL DEFAULT 0,
	limit_at       timestamptz,
	limit_node     text NOT NULL DEFAULT '',
	remaining      double precision NOT NULL DEFAULT -1,
	reset_at       timestamptz,
	sent_at        timestamptz,
	observed_at    timestamptz,
	remaining_node text NOT NULL DEFAULT '',
	PRIMARY KEY (key, account, dim)
);`

// pgLearnedUpsert is mergeLearned in SQL: the limit is replaced when the
// report's limit_at is later, the remaining when its observed_at is (a
// NULL instant reports nothing). Every SET expression reads the old row.
const pgLearnedUpsert = `
INSERT INTO sluice_cluster_learned AS l (key, account, dim, limit_value, limit_at, limit_node,
	remaining, reset_at, sent_at, observed_at, remaining_node)
VALUES ($1, $2, $3, $4, $5, CASE WHEN $5::timestamptz IS NULL THEN '' ELSE $6 END,
	$7, $8, $9, $10, CASE WHEN $10::timestamptz IS NULL THEN '' ELSE $6 END)
ON CONFLICT (key, account, dim) DO UPDATE SET
	limit_value = CASE WHEN excluded.limit_at > coalesce(l.limit_at, '-infinity') THEN excluded.limit_value ELSE l.limit_value END,
	limit_at    = CASE WHEN excluded.limit_at > coalesce(l.limit_at, '-infinity') THEN excluded.limit_at ELSE l.limit_at END,
	limit_node  = CASE WHEN excluded.limit_at > coalesce(l.limit_at, '-infinity') THEN excluded.limit_node ELSE l.limit_node END,
	remaining      = CASE WHEN excluded.observed_at > coalesce(l.observed_at, '-infinity') THEN excluded.remaining ELSE l.remaining END,
	reset_at       = CASE WHEN excluded.observed_at > coalesce(l.observed_at, '-infinity') THEN excluded.reset_at ELSE l.reset_at END,
	sent_at        = CASE WHEN excluded.observed_at > coalesce(l.observed_at, '-infinity') THEN excluded.sent_at ELSE l.sent_at END,
	observed_at    = CASE WHEN excluded.observed_at > coalesce(l.observed_at, '-infinity') THEN excluded.observed_at ELSE l.observed_at END,
	remaining_node = CASE WHEN excluded.observed_at > coalesce(l.observed_at, '-infinity') THEN excluded.remaining_node ELSE l.remaining_node END`

// pgLearnedSelect reads a key's records.
const pgLearnedSelect = `SELECT account, dim, limit_value, limit_at, limit_node, remaining, reset_at, sent_at, observed_at, remaining_node
	FROM sluice_cluster_learned WHERE key = $1`

// queueLearned queues, in Sync's first batch (so no round trip is added;
// the key's advisory lock serialises it), the merge of r's reports into
// the key's: a read of the records before (to tell a changed limit), the
// upserts, and a read after.
func queueLearned(b *pgx.Batch, r Report) {
	if len(r.Learned) > 0 {
		b.Queue(pgLearnedSelect, r.Key)
	}
	for _, l := range r.Learned {
		lim, rem := l.Limit, l.Remaining
		limAt, at := l.LimitAt, l.At
		if !l.HasLimit() {
			lim, limAt = 0, time.Time{}
		}
		if !l.HasRemaining() {
			rem, at = -1, time.Time{}
		}
		b.Queue(pgLearnedUpsert, r.Key, l.Account, int(l.Dim), lim, nullTime(limAt), r.Node,
			rem, nullTime(l.Reset), nullTime(l.SentAt), nullTime(at))
	}
	b.Queue(pgLearnedSelect, r.Key)
}

// readLearnedBatch reads queueLearned's answers: the key's records and
// whether a limit's value changed.
func readLearnedBatch(res pgx.BatchResults, r Report) ([]flow.ClusterReport, bool, error) {
	var before []flow.ClusterReport
	if len(r.Learned) > 0 {
		var err error
		if before, err = readLearned(res); err != nil {
			return nil, false, err
		}
	}
	for range r.Learned {
		if _, err := res.Exec(); err != nil {
			return nil, false, err
		}
	}
	out, err := readLearned(res)
	if err != nil {
		return nil, false, err
	}
	changed := false // nothing reported, nothing changed (before was not read)
	for _, l := range out {
		if len(r.Learned) == 0 {
			break
		}
		i := slices.IndexFunc(before, func(o flow.ClusterReport) bool { return o.Account == l.Account && o.Dim == l.Dim })
		changed = changed || (l.HasLimit() && (i < 0 || before[i].Limit != l.Limit))
	}
	return out, changed, nil
}

// readLearned reads one select of a key's records.
func readLearned(res pgx.BatchResults) ([]flow.ClusterReport, error) {
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []flow.ClusterReport
	for rows.Next() {
		var l flow.ClusterReport
		var dim int
		var limAt, reset, sent, at *time.Time
		if err := rows.Scan(&l.Account, &dim, &l.Limit, &limAt, &l.LimitNode, &l.Remaining, &reset, &sent, &at, &l.RemainingNode); err != nil {
			return nil, err
		}
		l.Dim = flow.Dim(dim)
		for _, x := range []struct{ src, dst *time.Time }{{limAt, &l.LimitAt}, {reset, &l.Reset}, {sent, &l.SentAt}, {at, &l.At}} {
			if x.src != nil {
				*x.dst = *x.src
			}
		}
		out = append(out, normalLearned(l))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortLearned(out)
	return out, nil
}
