package jobstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

func (s *sqliteStore) CreateFile(ctx context.Context, p CreateFileParams) (*File, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating file: %w", err)
	}
	now := storeTime(p.Now)
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sluice_files (id, client, upstream, purpose, filename, bytes, content, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, p.ID, p.Client, p.Upstream, p.Purpose, p.Filename, len(p.Content), p.Content, micros(now))
		return mapSQLiteErr(err)
	})
	if err != nil {
		return nil, fmt.Errorf("creating file: %w", err)
	}
	return &File{ID: p.ID, Client: p.Client, Upstream: p.Upstream, Purpose: p.Purpose, Filename: p.Filename,
		Bytes: int64(len(p.Content)), CreatedAt: now}, nil
}

const sqliteFileColumns = `id, client, upstream, purpose, filename, bytes, created_at`

func scanSQLiteFile(row interface{ Scan(...any) error }, extra ...any) (*File, error) {
	f := &File{}
	var created sql.NullInt64
	if err := row.Scan(append([]any{&f.ID, &f.Client, &f.Upstream, &f.Purpose, &f.Filename, &f.Bytes, &created}, extra...)...); err != nil {
		return nil, err
	}
	f.CreatedAt = fromMicros(created)
	return f, nil
}

func (s *sqliteStore) GetFile(ctx context.Context, p GetFileParams) (*File, error) {
	cols := sqliteFileColumns
	var content []byte
	var extra []any
	if p.Content {
		cols += `, content`
		extra = append(extra, &content)
	}
	f, err := scanSQLiteFile(s.r.QueryRowContext(ctx, `SELECT `+cols+` FROM sluice_files WHERE id = ?`, p.ID), extra...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("getting file %s: %w", p.ID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting file %s: %w", p.ID, err)
	}
	if p.Content {
		f.Content = append([]byte{}, content...)
	}
	return f, nil
}

func (s *sqliteStore) ListFiles(ctx context.Context, p ListFilesParams) ([]*File, error) {
	q := `SELECT ` + sqliteFileColumns + ` FROM sluice_files WHERE (?1 = '' OR client = ?1) AND (?2 = '' OR upstream = ?2)
		AND (?3 = '' OR purpose = ?3)`
	if p.After != "" {
		q += ` AND (created_at, id) < (SELECT created_at, id FROM sluice_files WHERE id = ?4)`
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT ?5`, p.Client, p.Upstream, p.Purpose, p.After, p.limit())
	if err != nil {
		return nil, fmt.Errorf("listing files: %w", err)
	}
	defer rows.Close()
	var out []*File
	for rows.Next() {
		f, err := scanSQLiteFile(rows)
		if err != nil {
			return nil, fmt.Errorf("listing files: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing files: %w", err)
	}
	return out, nil
}

func (s *sqliteStore) DeleteFile(ctx context.Context, id string) error {
	err := s.write(ctx, func(ctx context.Context, tx sqliteTx, _ *[]string) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM sluice_files WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting file %s: %w", id, err)
	}
	return nil
}
