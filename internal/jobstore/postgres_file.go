package jobstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

func (s *postgresStore) CreateFile(ctx context.Context, p CreateFileParams) (*File, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("creating file: %w", err)
	}
	now := storeTime(p.Now)
	_, err := s.pool.Exec(ctx, `INSERT INTO sluice_files (id, client, upstream, purpose, filename, bytes, content, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, p.ID, p.Client, p.Upstream, p.Purpose, p.Filename, len(p.Content), p.Content, pgTime(now))
	if err != nil {
		return nil, fmt.Errorf("creating file: %w", mapPgErr(err))
	}
	return &File{ID: p.ID, Client: p.Client, Upstream: p.Upstream, Purpose: p.Purpose, Filename: p.Filename,
		Bytes: int64(len(p.Content)), CreatedAt: now}, nil
}

const pgFileColumns = `id, client, upstream, purpose, filename, bytes, created_at`

func scanPgFile(row pgx.Row, extra ...any) (*File, error) {
	f := &File{}
	created := pgTime(time.Time{})
	if err := row.Scan(append([]any{&f.ID, &f.Client, &f.Upstream, &f.Purpose, &f.Filename, &f.Bytes, &created}, extra...)...); err != nil {
		return nil, err
	}
	f.CreatedAt = fromPgTime(created)
	return f, nil
}

func (s *postgresStore) GetFile(ctx context.Context, p GetFileParams) (*File, error) {
	cols := pgFileColumns
	var content []byte
	var extra []any
	if p.Content {
		cols += `, content`
		extra = append(extra, &content)
	}
	f, err := scanPgFile(s.pool.QueryRow(ctx, `SELECT `+cols+` FROM sluice_files WHERE id = $1`, p.ID), extra...)
	if err != nil {
		return nil, fmt.Errorf("getting file %s: %w", p.ID, mapPgErr(err))
	}
	if p.Content {
		f.Content = content
		if f.Content == nil {
			f.Content = []byte{}
		}
	}
	return f, nil
}

func (s *postgresStore) ListFiles(ctx context.Context, p ListFilesParams) ([]*File, error) {
	q := `SELECT ` + pgFileColumns + ` FROM sluice_files WHERE ($1 = '' OR client = $1) AND ($2 = '' OR upstream = $2)
		AND ($3 = '' OR purpose = $3)`
	if p.After != "" {
		q += ` AND (created_at, id) < (SELECT created_at, id FROM sluice_files WHERE id = $4)`
	} else {
		q += ` AND $4 = ''`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at DESC, id DESC LIMIT $5`, p.Client, p.Upstream, p.Purpose, p.After, p.limit())
	if err != nil {
		return nil, fmt.Errorf("listing files: %w", err)
	}
	defer rows.Close()
	var out []*File
	for rows.Next() {
		f, err := scanPgFile(rows)
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

func (s *postgresStore) DeleteFile(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM sluice_files WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("deleting file %s: %w", id, mapPgErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("deleting file %s: %w", id, ErrNotFound)
	}
	return nil
}
