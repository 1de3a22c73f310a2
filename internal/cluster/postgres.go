package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is the Backend on a PostgreSQL database (the job store's, or
// cluster.store's): three small tables created on open in the DSN's
// search_path. Each Sync is one transaction serialised per key by a
// transaction-scoped advisory lock; expiry is measured on the database's
// clock, so the nodes' clocks need not agree.
type Postgres struct {
	pool *pgxpool.Pool
}

const pgSchema = `
CREATE TABLE IF NOT EXISTS sluice_cluster_leases (
	key         text NOT NULL,
	node        text NOT NULL,
	share       double precision NOT NULL,
	demand      double precision NOT NULL,
	slots       integer NOT NULL,
	slot_demand double precision NOT NULL,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (key, node)
);
CREATE TABLE IF NOT EXISTS sluice_cluster_signals (
	key          text PRIMARY KEY,
	paused_until timestamptz
);
CREATE TABLE IF NOT EXISTS sluice_cluster_leaders (
	name       text PRIMARY KEY,
	node       text NOT NULL,
	expires_at timestamptz NOT NULL
);
-- The columns added since the tables' first release, each only when it is
-- missing: an ALTER TABLE takes the table's exclusive lock even when it
-- has nothing to do, and the syncs running meanwhile would wait on it, or
-- deadlock with it (they lock the leases, then the signals).
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'sluice_cluster_leases'::regclass
			AND attname = 'incarnation' AND NOT attisdropped) THEN
		ALTER TABLE sluice_cluster_leases ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'sluice_cluster_signals'::regclass
			AND attname = 'pool_at' AND NOT attisdropped) THEN
		ALTER TABLE sluice_cluster_signals
			ADD COLUMN IF NOT EXISTS open_until timestamptz,
			ADD COLUMN IF NOT EXISTS probe_node text,
			ADD COLUMN IF NOT EXISTS probe_expires timestamptz,
			ADD COLUMN IF NOT EXISTS pool double precision NOT NULL DEFAULT 0,
			ADD COLUMN IF NOT EXISTS pool_at timestamptz;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'sluice_cluster_leaders'::regclass
			AND attname = 'incarnation' AND NOT attisdropped) THEN
		ALTER TABLE sluice_cluster_leaders ADD COLUMN IF NOT EXISTS incarnation text NOT NULL DEFAULT '';
	END IF;
END
$$;`

// OpenPostgres connects to dsn and creates the cluster's tables if they
// are missing.
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("cluster store: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster store: %w", err)
	}
	// Concurrent CREATE TABLE IF NOT EXISTS can race on the catalog: one
	// creator at a time.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7147290311)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgSchema+pgLearnedSchema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("cluster store: creating tables: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// Close implements Backend.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// Sync implements Backend: one transaction of two batches (the second only
// when something is written back), serialised per key by an advisory
// transaction lock.
func (p *Postgres) Sync(ctx context.Context, r Report) (Grant, error) {
	if err := r.validate(); err != nil {
		return Grant{}, err
	}
	var g Grant
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		g = Grant{}
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, r.Key)
		b.Queue(`DELETE FROM sluice_cluster_leases WHERE key = $1 AND expires_at < now()`, r.Key)
		b.Queue(pgTakeover, r.Key, r.Node, r.Incarnation, r.Renew)
		b.Queue(`SELECT coalesce(sum(share), 0), count(*), max(expires_at) FILTER (WHERE node = $2 AND incarnation = $3)
			FROM sluice_cluster_leases WHERE key = $1`, r.Key, r.Node, r.Incarnation)
		// Our own leases kept aside or under our former id (held until
		// now, so counted above): this report holds what we apply now.
		former := ownFormer(r)
		b.Queue(`DELETE FROM sluice_cluster_leases WHERE key = $1 AND incarnation = $2 AND node IN ($3, $4, $5)`,
			r.Key, r.Incarnation, former[0], former[1], former[2])
		// Another incarnation's lease left here (Renew) is not written:
		// no row comes back, and the leases below name it.
		b.Queue(`INSERT INTO sluice_cluster_leases (key, node, share, demand, slots, slot_demand, expires_at, incarnation)
			VALUES ($1, $2, $3, $4, $5, $6, now() + $7 * interval '1 microsecond', $8)
			ON CONFLICT (key, node) DO UPDATE SET share = excluded.share, demand = excluded.demand,
				slots = excluded.slots, slot_demand = excluded.slot_demand, expires_at = excluded.expires_at
				WHERE sluice_cluster_leases.incarnation = excluded.incarnation
			RETURNING true`,
			r.Key, r.Node, r.Share, r.Demand, r.Slots, r.SlotDemand, r.TTL.Microseconds(), r.Incarnation)
		b.Queue(`SELECT node, share, demand, slots, slot_demand, expires_at, incarnation FROM sluice_cluster_leases WHERE key = $1`, r.Key)
		b.Queue(`INSERT INTO sluice_cluster_signals (key) VALUES ($1)
			ON CONFLICT (key) DO UPDATE SET key = excluded.key
			RETURNING paused_until, open_until, coalesce(probe_node, ''), probe_expires, pool, pool_at, now()`, r.Key)
		queueLearned(b, r)
		res := tx.SendBatch(ctx, b)
		sig, v, now, wrote, err := p.readSync(res, &g, r.TTL)
		var learnedChanged bool
		if err == nil {
			g.Learned, learnedChanged, err = readLearnedBatch(res, r)
		}
		if err := errors.Join(err, res.Close()); err != nil {
			return err
		}
		if !wrote {
			// Rolled back: nothing of this sync is kept.
			dup := &DuplicateError{Key: r.Key, Node: r.Node}
			for _, l := range g.Leases {
				if l.Node == r.Node {
					dup.Incarnation = l.Incarnation
				}
			}
			return dup
		}
		next, announce := sig.step(r, now)
		g.PausedUntil, g.BreakerOpenUntil, g.Probe = next.PausedUntil, next.OpenUntil, next.ProbeNode == r.Node
		g.Share, g.Slots = Allocate(g.Leases, r.Node, r.MaxSlots)
		next.Pool, g.Credit = next.Pool.step(r, v, g.Share, now)
		g.Pool = next.Pool.Level
		hold, holdSlots := max(g.Share, r.Share), max(g.Slots, r.Slots)
		w := &pgx.Batch{}
		if hold != r.Share || holdSlots != r.Slots {
			w.Queue(`UPDATE sluice_cluster_leases SET share = $3, slots = $4 WHERE key = $1 AND node = $2`,
				r.Key, r.Node, hold, holdSlots)
			for i := range g.Leases {
				if g.Leases[i].Node == r.Node {
					g.Leases[i].Share, g.Leases[i].Slots = hold, holdSlots
				}
			}
		}
		if next != sig {
			w.Queue(`UPDATE sluice_cluster_signals SET paused_until = $2, open_until = $3, probe_node = nullif($4, ''), probe_expires = $5,
				pool = $6, pool_at = $7 WHERE key = $1`,
				r.Key, nullTime(next.PausedUntil), nullTime(next.OpenUntil), next.ProbeNode, nullTime(next.ProbeExpires),
				next.Pool.Level, nullTime(next.Pool.At))
		}
		if announce || learnedChanged {
			// Delivered at commit: the other nodes sync at once (Listen).
			w.Queue(`SELECT pg_notify('`+pgChannel+`', $1)`, r.Key)
		}
		if w.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, w).Close()
	})
	if err != nil {
		return Grant{}, fmt.Errorf("cluster sync %s: %w", r.Key, err)
	}
	sortLeases(g.Leases)
	return g, nil
}

// pgTakeover sets aside the unexpired lease of ($1 key, $2 node) when
// another incarnation than $3 wrote it and the sync is not a renewal ($4):
// it moves under asideNode's name, where it counts until it expires.
const pgTakeover = `WITH moved AS (
	DELETE FROM sluice_cluster_leases WHERE key = $1 AND node = $2 AND incarnation <> $3 AND NOT $4::boolean
	RETURNING key, node, share, demand, slots, slot_demand, expires_at, incarnation)
INSERT INTO sluice_cluster_leases (key, node, share, demand, slots, slot_demand, expires_at, incarnation)
SELECT key, node || '~' || incarnation, share, demand, slots, slot_demand, expires_at, incarnation FROM moved
ON CONFLICT (key, node) DO UPDATE SET share = excluded.share, demand = excluded.demand, slots = excluded.slots,
	slot_demand = excluded.slot_demand, expires_at = excluded.expires_at, incarnation = excluded.incarnation`

// readSync reads the first batch's answers: the leases before this
// node's renewal (for the burst pool), whether the renewal was written
// (not when another incarnation holds the lease), the leases into g,
// then the key's signals and the database's clock.
func (p *Postgres) readSync(res pgx.BatchResults, g *Grant, ttl time.Duration) (signals, poolView, time.Time, bool, error) {
	fail := func(err error) (signals, poolView, time.Time, bool, error) {
		return signals{}, poolView{}, time.Time{}, false, err
	}
	for range 3 {
		if _, err := res.Exec(); err != nil {
			return fail(err)
		}
	}
	var v poolView
	var count int
	var selfExp *time.Time
	if err := res.QueryRow().Scan(&v.held, &count, &selfExp); err != nil {
		return fail(err)
	}
	if _, err := res.Exec(); err != nil {
		return fail(err)
	}
	wrote := false
	if err := res.QueryRow().Scan(&wrote); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fail(err)
	}
	rows, err := res.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var l Lease
		if err := rows.Scan(&l.Node, &l.Share, &l.Demand, &l.Slots, &l.SlotDemand, &l.ExpiresAt, &l.Incarnation); err != nil {
			rows.Close()
			return fail(err)
		}
		g.Leases = append(g.Leases, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	var sig signals
	var paused, open, probeExp, poolAt *time.Time
	var now time.Time
	if err := res.QueryRow().Scan(&paused, &open, &sig.ProbeNode, &probeExp, &sig.Pool.Level, &poolAt, &now); err != nil {
		return fail(err)
	}
	for _, x := range []struct {
		src *time.Time
		dst *time.Time
	}{{paused, &sig.PausedUntil}, {open, &sig.OpenUntil}, {probeExp, &sig.ProbeExpires}, {poolAt, &sig.Pool.At}} {
		if x.src != nil {
			*x.dst = *x.src
		}
	}
	v.fresh, v.since = count == 0, -1
	if selfExp != nil {
		v.since = now.Sub(selfExp.Add(-ttl))
	}
	return sig, v, now, wrote, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Leave implements Backend.
func (p *Postgres) Leave(ctx context.Context, key, node, incarnation string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM sluice_cluster_leases WHERE key = $1 AND node IN ($2, $3) AND incarnation = $4`,
		key, node, asideNode(node, incarnation), incarnation); err != nil {
		return fmt.Errorf("cluster leave %s: %w", key, err)
	}
	return nil
}

// Lead implements Backend: one row per leadership, taken when it is free
// or expired and renewed by its holder's incarnation.
func (p *Postgres) Lead(ctx context.Context, name, node, incarnation string, ttl time.Duration) (bool, error) {
	var holder string
	err := p.pool.QueryRow(ctx, `INSERT INTO sluice_cluster_leaders (name, node, incarnation, expires_at)
		VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET node = excluded.node, incarnation = excluded.incarnation, expires_at = excluded.expires_at
			WHERE sluice_cluster_leaders.incarnation = excluded.incarnation OR sluice_cluster_leaders.expires_at < now()
		RETURNING incarnation`, name, node, incarnation, ttl.Microseconds()).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster lead %s: %w", name, err)
	}
	return holder == incarnation, nil
}

// pgChannel is the LISTEN/NOTIFY channel a published pause is announced on.
const pgChannel = "sluice_cluster"

// Listen implements Listener: it holds one connection LISTENing on the
// cluster's channel and calls changed with the key of every pause another
// node publishes, until ctx ends. A lost connection is retried after a
// second.
func (p *Postgres) Listen(ctx context.Context, changed func(key string)) {
	for ctx.Err() == nil {
		if err := p.listenOnce(ctx, changed); err != nil && ctx.Err() == nil {
			t := time.NewTimer(time.Second) //nolint:forbidigo // a reconnect pause against a real server
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

func (p *Postgres) listenOnce(ctx context.Context, changed func(key string)) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// The connection is LISTENing: close it rather than give it back.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgChannel); err != nil {
		return err
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		changed(n.Payload)
	}
}
