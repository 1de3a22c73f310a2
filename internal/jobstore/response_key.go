package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ResponseKey records which key of an upstream's pool created a stored
// OpenAI Response: only that key can read, delete, cancel or continue it
// (docs/http-api.md, "Stored responses"). The store keeps it so that a
// restarted gateway, and every node of a cluster sharing the store, sends
// those calls with the right key.
type ResponseKey struct {
	// Upstream names the upstream whose pool holds the key.
	Upstream string
	// ID is the Response's id (resp_…).
	ID string
	// Key is the key's fingerprint (dispatch.Fingerprint), never the key.
	Key string
	// CreatedAt is when the Response was created.
	CreatedAt time.Time
	// ExpiresAt is when the provider forgets the Response: the record is
	// not returned from then on, and the retention cleaner deletes it.
	ExpiresAt time.Time
}

// PutResponseKeyParams records a Response's key; a record of the same
// Upstream and ID is replaced.
type PutResponseKeyParams struct {
	ResponseKey
}

func (p *PutResponseKeyParams) validate() error {
	switch {
	case p.Upstream == "":
		return invalid("Upstream", "required")
	case p.ID == "":
		return invalid("ID", "required")
	case p.Key == "":
		return invalid("Key", "required")
	case p.CreatedAt.IsZero():
		return invalid("CreatedAt", "required")
	case !p.ExpiresAt.After(p.CreatedAt):
		return invalid("ExpiresAt", "%v is not after CreatedAt", p.ExpiresAt)
	}
	return nil
}

// GetResponseKeyParams asks for a Response's key at Now.
type GetResponseKeyParams struct {
	Upstream string
	ID       string
	Now      time.Time
}

// DeleteResponseKeysParams sweeps expired records.
type DeleteResponseKeysParams struct {
	// Now: records that expired at or before it are deleted.
	Now time.Time
	// Limit bounds one call; zero means RescueLimitDefault.
	Limit int
}

// The response keys' SQL, shared by both dialects: %[n]s are the
// placeholders.
const (
	responseKeyPut = `INSERT INTO sluice_response_keys (upstream, id, key, created_at, expires_at)
	VALUES (%[1]s, %[2]s, %[3]s, %[4]s, %[5]s)
	ON CONFLICT (upstream, id) DO UPDATE SET key = excluded.key, created_at = excluded.created_at, expires_at = excluded.expires_at`
	responseKeyGet = `SELECT key, created_at, expires_at FROM sluice_response_keys
	WHERE upstream = %[1]s AND id = %[2]s AND expires_at > %[3]s`
	responseKeysDelete = `DELETE FROM sluice_response_keys WHERE (upstream, id) IN
	(SELECT upstream, id FROM sluice_response_keys WHERE expires_at <= %[1]s LIMIT %[2]s)`
)

var (
	sqliteResponseKeyPut     = fmt.Sprintf(responseKeyPut, "?1", "?2", "?3", "?4", "?5")
	sqliteResponseKeyGet     = fmt.Sprintf(responseKeyGet, "?1", "?2", "?3")
	sqliteResponseKeysDelete = fmt.Sprintf(responseKeysDelete, "?1", "?2")
	pgResponseKeyPut         = fmt.Sprintf(responseKeyPut, "$1", "$2", "$3", "$4", "$5")
	pgResponseKeyGet         = fmt.Sprintf(responseKeyGet, "$1", "$2", "$3")
	pgResponseKeysDelete     = fmt.Sprintf(responseKeysDelete, "$1", "$2")
)

func notFoundResponseKey(p GetResponseKeyParams) error {
	return fmt.Errorf("reading a response's key: %w: no key recorded for response %q of upstream %q", ErrNotFound, p.ID, p.Upstream)
}

func (s *sqliteStore) PutResponseKey(ctx context.Context, p PutResponseKeyParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("recording a response's key: %w", err)
	}
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		_, err := tx.ExecContext(ctx, sqliteResponseKeyPut, p.Upstream, p.ID, p.Key, micros(p.CreatedAt), micros(p.ExpiresAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("recording a response's key: %w", err)
	}
	return nil
}

func (s *sqliteStore) GetResponseKey(ctx context.Context, p GetResponseKeyParams) (ResponseKey, error) {
	out := ResponseKey{Upstream: p.Upstream, ID: p.ID}
	var created, expires int64
	err := s.r.QueryRowContext(ctx, sqliteResponseKeyGet, p.Upstream, p.ID, micros(p.Now)).Scan(&out.Key, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return ResponseKey{}, notFoundResponseKey(p)
	}
	if err != nil {
		return ResponseKey{}, fmt.Errorf("reading a response's key: %w", err)
	}
	out.CreatedAt = fromMicros(sql.NullInt64{Int64: created, Valid: true})
	out.ExpiresAt = fromMicros(sql.NullInt64{Int64: expires, Valid: true})
	return out, nil
}

func (s *sqliteStore) DeleteResponseKeys(ctx context.Context, p DeleteResponseKeysParams) (int, error) {
	var n int64
	err := s.writeOne(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		res, err := tx.ExecContext(ctx, sqliteResponseKeysDelete, micros(p.Now), limitOr(p.Limit))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("deleting expired response keys: %w", err)
	}
	return int(n), nil
}

func (s *postgresStore) PutResponseKey(ctx context.Context, p PutResponseKeyParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("recording a response's key: %w", err)
	}
	if _, err := s.pool.Exec(ctx, pgResponseKeyPut, p.Upstream, p.ID, p.Key, pgTime(p.CreatedAt), pgTime(p.ExpiresAt)); err != nil {
		return fmt.Errorf("recording a response's key: %w", err)
	}
	return nil
}

func (s *postgresStore) GetResponseKey(ctx context.Context, p GetResponseKeyParams) (ResponseKey, error) {
	out := ResponseKey{Upstream: p.Upstream, ID: p.ID}
	err := s.pool.QueryRow(ctx, pgResponseKeyGet, p.Upstream, p.ID, pgTime(p.Now)).Scan(&out.Key, &out.CreatedAt, &out.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return ResponseKey{}, notFoundResponseKey(p)
	}
	if err != nil {
		return ResponseKey{}, fmt.Errorf("reading a response's key: %w", err)
	}
	out.CreatedAt, out.ExpiresAt = out.CreatedAt.UTC(), out.ExpiresAt.UTC()
	return out, nil
}

func (s *postgresStore) DeleteResponseKeys(ctx context.Context, p DeleteResponseKeysParams) (int, error) {
	tag, err := s.pool.Exec(ctx, pgResponseKeysDelete, pgTime(p.Now), limitOr(p.Limit))
	if err != nil {
		return 0, fmt.Errorf("deleting expired response keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// limitOr is limit, or RescueLimitDefault when it is not positive.
func limitOr(limit int) int {
	if limit <= 0 {
		return RescueLimitDefault
	}
	return limit
}
