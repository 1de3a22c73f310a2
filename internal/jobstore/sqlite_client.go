package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The runtime clients' SQL, shared by both dialects: %[n]s are the
// placeholders, %[9]s the next version's expression.
const (
	clientCreate = `INSERT INTO sluice_clients (name, spec, keys, version, created_at, updated_at, deleted_at)
	VALUES (%[1]s, %[2]s, %[3]s, %[9]s, %[4]s, %[4]s, NULL)
	ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, keys = excluded.keys, version = excluded.version,
		created_at = excluded.created_at, updated_at = excluded.updated_at, deleted_at = NULL
	WHERE sluice_clients.deleted_at IS NOT NULL
	RETURNING version`
	clientUpdate = `UPDATE sluice_clients SET spec = %[2]s, keys = %[3]s, version = %[9]s, updated_at = %[4]s
	WHERE name = %[1]s AND deleted_at IS NULL AND (CAST(%[5]s AS BIGINT) = 0 OR version = CAST(%[5]s AS BIGINT))
	RETURNING version, created_at`
	clientDelete = `UPDATE sluice_clients SET spec = '{}', keys = '[]', version = %[9]s, updated_at = %[2]s, deleted_at = %[2]s
	WHERE name = %[1]s AND deleted_at IS NULL`
	clientLive    = `SELECT version FROM sluice_clients WHERE name = %s AND deleted_at IS NULL`
	clientColumns = `SELECT name, spec, keys, version, created_at, updated_at FROM sluice_clients WHERE deleted_at IS NULL`
	clientsSum    = `SELECT CAST(COALESCE(SUM(version), 0) AS BIGINT) FROM sluice_clients`
)

const sqliteNextClientVersion = `(SELECT COALESCE(MAX(version), 0) + 1 FROM sluice_clients)`

var (
	sqliteClientCreate = fmt.Sprintf(clientCreate, "?1", "?2", "?3", "?4", "?5", "", "", "", sqliteNextClientVersion)
	sqliteClientUpdate = fmt.Sprintf(clientUpdate, "?1", "?2", "?3", "?4", "?5", "", "", "", sqliteNextClientVersion)
	sqliteClientDelete = fmt.Sprintf(clientDelete, "?1", "?2", "", "", "", "", "", "", sqliteNextClientVersion)
	sqliteClientLive   = fmt.Sprintf(clientLive, "?")
)

func (s *sqliteStore) CreateClient(ctx context.Context, p CreateClientParams) (*StoredClient, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	keys, err := encodeClientKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	out := &StoredClient{Name: p.Name, Spec: p.Spec, Keys: p.Keys, CreatedAt: storeTime(p.Now), UpdatedAt: storeTime(p.Now)}
	err = s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		err := tx.QueryRowContext(ctx, sqliteClientCreate, p.Name, string(p.Spec), keys, micros(p.Now)).Scan(&out.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: client %q exists", ErrConflict, p.Name)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	out.Keys, _ = decodeClientKeys(keys)
	return out, nil
}

func (s *sqliteStore) UpdateClient(ctx context.Context, p UpdateClientParams) (*StoredClient, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("updating client: %w", err)
	}
	keys, err := encodeClientKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	out := &StoredClient{Name: p.Name, Spec: p.Spec, UpdatedAt: storeTime(p.Now)}
	err = s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		var created int64
		err := tx.QueryRowContext(ctx, sqliteClientUpdate, p.Name, string(p.Spec), keys, micros(p.Now), p.IfVersion).Scan(&out.Version, &created)
		if errors.Is(err, sql.ErrNoRows) {
			var v int64
			if err := tx.QueryRowContext(ctx, sqliteClientLive, p.Name).Scan(&v); errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: no client %q", ErrNotFound, p.Name)
			} else if err != nil {
				return err
			}
			return fmt.Errorf("%w: client %q changed since version %d (now %d)", ErrConflict, p.Name, p.IfVersion, v)
		}
		out.CreatedAt = fromMicros(sql.NullInt64{Int64: created, Valid: true})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("updating client: %w", err)
	}
	out.Keys, _ = decodeClientKeys(keys)
	return out, nil
}

func (s *sqliteStore) DeleteClient(ctx context.Context, p DeleteClientParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("revoking client: %w", err)
	}
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		res, err := tx.ExecContext(ctx, sqliteClientDelete, p.Name, micros(p.Now))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w: no client %q", ErrNotFound, p.Name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoking client: %w", err)
	}
	return nil
}

func (s *sqliteStore) GetClient(ctx context.Context, name string) (*StoredClient, error) {
	got, err := s.readClients(ctx, clientColumns+" AND name = ?", name)
	if err != nil {
		return nil, fmt.Errorf("reading client: %w", err)
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("reading client: %w: no client %q", ErrNotFound, name)
	}
	return got[0], nil
}

func (s *sqliteStore) ListClients(ctx context.Context) ([]*StoredClient, error) {
	got, err := s.readClients(ctx, clientColumns+" ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("listing clients: %w", err)
	}
	return got, nil
}

func (s *sqliteStore) ClientsVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.r.QueryRowContext(ctx, clientsSum).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the clients' version: %w", err)
	}
	return v, nil
}

func (s *sqliteStore) readClients(ctx context.Context, q string, args ...any) ([]*StoredClient, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*StoredClient{}
	for rows.Next() {
		var c StoredClient
		var spec, keys string
		var created, updated int64
		if err := rows.Scan(&c.Name, &spec, &keys, &c.Version, &created, &updated); err != nil {
			return nil, err
		}
		c.Spec = []byte(spec)
		if c.Keys, err = decodeClientKeys(keys); err != nil {
			return nil, err
		}
		c.CreatedAt = fromMicros(sql.NullInt64{Int64: created, Valid: true})
		c.UpdatedAt = fromMicros(sql.NullInt64{Int64: updated, Valid: true})
		out = append(out, &c)
	}
	return out, rows.Err()
}
