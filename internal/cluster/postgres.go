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
);`

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
		_, err := tx.Exec(ctx, pgSchema)
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

// Sync implements Backend.
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
		b.Queue(`INSERT INTO sluice_cluster_leases (key, node, share, demand, slots, slot_demand, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6, now() + $7 * interval '1 microsecond')
			ON CONFLICT (key, node) DO UPDATE SET share = excluded.share, demand = excluded.demand,
				slots = excluded.slots, slot_demand = excluded.slot_demand, expires_at = excluded.expires_at`,
			r.Key, r.Node, r.Share, r.Demand, r.Slots, r.SlotDemand, r.TTL.Microseconds())
		b.Queue(`SELECT node, share, demand, slots, slot_demand, expires_at FROM sluice_cluster_leases WHERE key = $1`, r.Key)
		var paused *time.Time
		if !r.PausedUntil.IsZero() {
			paused = &r.PausedUntil
		}
		b.Queue(`INSERT INTO sluice_cluster_signals (key, paused_until) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET paused_until = GREATEST(sluice_cluster_signals.paused_until, excluded.paused_until)
			RETURNING paused_until`, r.Key, paused)
		if paused != nil {
			// Delivered at commit: the other nodes sync at once (Listen).
			b.Queue(`SELECT pg_notify('`+pgChannel+`', $1)`, r.Key)
		}
		res := tx.SendBatch(ctx, b)
		for range 3 {
			if _, err := res.Exec(); err != nil {
				_ = res.Close()
				return err
			}
		}
		rows, err := res.Query()
		if err != nil {
			_ = res.Close()
			return err
		}
		for rows.Next() {
			var l Lease
			if err := rows.Scan(&l.Node, &l.Share, &l.Demand, &l.Slots, &l.SlotDemand, &l.ExpiresAt); err != nil {
				rows.Close()
				_ = res.Close()
				return err
			}
			g.Leases = append(g.Leases, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			_ = res.Close()
			return err
		}
		var until *time.Time
		if err := res.QueryRow().Scan(&until); err != nil {
			_ = res.Close()
			return err
		}
		if until != nil {
			g.PausedUntil = *until
		}
		if paused != nil {
			if _, err := res.Exec(); err != nil {
				_ = res.Close()
				return err
			}
		}
		if err := res.Close(); err != nil {
			return err
		}
		g.Share, g.Slots = Allocate(g.Leases, r.Node, r.MaxSlots)
		hold, holdSlots := max(g.Share, r.Share), max(g.Slots, r.Slots)
		if hold != r.Share || holdSlots != r.Slots {
			if _, err := tx.Exec(ctx, `UPDATE sluice_cluster_leases SET share = $3, slots = $4 WHERE key = $1 AND node = $2`,
				r.Key, r.Node, hold, holdSlots); err != nil {
				return err
			}
			for i := range g.Leases {
				if g.Leases[i].Node == r.Node {
					g.Leases[i].Share, g.Leases[i].Slots = hold, holdSlots
				}
			}
		}
		return nil
	})
	if err != nil {
		return Grant{}, fmt.Errorf("cluster sync %s: %w", r.Key, err)
	}
	sortLeases(g.Leases)
	return g, nil
}

// Leave implements Backend.
func (p *Postgres) Leave(ctx context.Context, key, node string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM sluice_cluster_leases WHERE key = $1 AND node = $2`, key, node); err != nil {
		return fmt.Errorf("cluster leave %s: %w", key, err)
	}
	return nil
}

// Lead implements Backend: one row per leadership, taken when it is free
// or expired and renewed by its holder.
func (p *Postgres) Lead(ctx context.Context, name, node string, ttl time.Duration) (bool, error) {
	var holder string
	err := p.pool.QueryRow(ctx, `INSERT INTO sluice_cluster_leaders (name, node, expires_at)
		VALUES ($1, $2, now() + $3 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET node = excluded.node, expires_at = excluded.expires_at
			WHERE sluice_cluster_leaders.node = excluded.node OR sluice_cluster_leaders.expires_at < now()
		RETURNING node`, name, node, ttl.Microseconds()).Scan(&holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster lead %s: %w", name, err)
	}
	return holder == node, nil
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
			t := time.NewTimer(time.Second)
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
