package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgNextClientVersion = `nextval('sluice_clients_version')`

var (
	pgClientCreate = fmt.Sprintf(clientCreate, "$1", "$2", "$3", "$4", "", "", "", "", pgNextClientVersion)
	pgClientUpdate = fmt.Sprintf(clientUpdate, "$1", "$2", "$3", "$4", "$5", "", "", "", pgNextClientVersion)
	pgClientDelete = fmt.Sprintf(clientDelete, "$1", "$2", "", "", "", "", "", "", pgNextClientVersion)
	pgClientLive   = fmt.Sprintf(clientLive, "$1")
)

func (s *postgresStore) CreateClient(ctx context.Context, p CreateClientParams) (*StoredClient, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	keys, err := encodeClientKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	out := &StoredClient{Name: p.Name, Spec: p.Spec, CreatedAt: storeTime(p.Now), UpdatedAt: storeTime(p.Now)}
	err = s.pool.QueryRow(ctx, pgClientCreate, p.Name, string(p.Spec), keys, pgTime(p.Now)).Scan(&out.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("creating client: %w: client %q exists", ErrConflict, p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	out.Keys, _ = decodeClientKeys(keys)
	return out, nil
}

func (s *postgresStore) UpdateClient(ctx context.Context, p UpdateClientParams) (*StoredClient, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("updating client: %w", err)
	}
	keys, err := encodeClientKeys(p.Keys)
	if err != nil {
		return nil, err
	}
	out := &StoredClient{Name: p.Name, Spec: p.Spec, UpdatedAt: storeTime(p.Now)}
	var created time.Time
	err = s.pool.QueryRow(ctx, pgClientUpdate, p.Name, string(p.Spec), keys, pgTime(p.Now), p.IfVersion).Scan(&out.Version, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		var v int64
		switch err := s.pool.QueryRow(ctx, pgClientLive, p.Name).Scan(&v); {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("updating client: %w: no client %q", ErrNotFound, p.Name)
		case err != nil:
			return nil, fmt.Errorf("updating client: %w", err)
		}
		return nil, fmt.Errorf("updating client: %w: client %q changed since version %d (now %d)", ErrConflict, p.Name, p.IfVersion, v)
	}
	if err != nil {
		return nil, fmt.Errorf("updating client: %w", err)
	}
	out.CreatedAt = created.UTC()
	out.Keys, _ = decodeClientKeys(keys)
	return out, nil
}

func (s *postgresStore) DeleteClient(ctx context.Context, p DeleteClientParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("revoking client: %w", err)
	}
	tag, err := s.pool.Exec(ctx, pgClientDelete, p.Name, pgTime(p.Now))
	if err != nil {
		return fmt.Errorf("revoking client: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoking client: %w: no client %q", ErrNotFound, p.Name)
	}
	return nil
}

func (s *postgresStore) GetClient(ctx context.Context, name string) (*StoredClient, error) {
	got, err := s.readClients(ctx, clientColumns+" AND name = $1", name)
	if err != nil {
		return nil, fmt.Errorf("reading client: %w", err)
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("reading client: %w: no client %q", ErrNotFound, name)
	}
	return got[0], nil
}

func (s *postgresStore) ListClients(ctx context.Context) ([]*StoredClient, error) {
	got, err := s.readClients(ctx, clientColumns+" ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("listing clients: %w", err)
	}
	return got, nil
}

func (s *postgresStore) ClientsVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, clientsSum).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the clients' version: %w", err)
	}
	return v, nil
}

func (s *postgresStore) readClients(ctx context.Context, q string, args ...any) ([]*StoredClient, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	type row struct {
		Name, Spec, Keys string
		Version          int64
		Created, Updated time.Time
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, err
	}
	out := make([]*StoredClient, 0, len(got))
	for _, r := range got {
		keys, err := decodeClientKeys(r.Keys)
		if err != nil {
			return nil, err
		}
		out = append(out, &StoredClient{Name: r.Name, Spec: []byte(r.Spec), Keys: keys, Version: r.Version,
			CreatedAt: r.Created.UTC(), UpdatedAt: r.Updated.UTC()})
	}
	return out, nil
}
