package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
)

// Defaults for Options.
const (
	ReadConnsDefault      = 4
	BusyTimeoutDefault    = 5 * time.Second
	MaxConnsDefault       = 16
	GroupCommitMaxDefault = 512
	PollIntervalDefault   = time.Second
	// DSNDefault is the store used when none is configured.
	DSNDefault = "sqlite:./sluice.db"
)

// Options tunes a store. The zero value is ready to use.
type Options struct {
	// NoMigrate makes Open fail when the schema is behind the code instead
	// of migrating it up. Defaults to false (migrate up on open).
	NoMigrate bool
	// ReadConns is the size of SQLite's reader pool (the writer is one
	// connection). Defaults to ReadConnsDefault.
	ReadConns int
	// BusyTimeout is how long SQLite waits for a lock held by another
	// process. Defaults to BusyTimeoutDefault.
	BusyTimeout time.Duration
	// MaxConns is the PostgreSQL pool size. Defaults to MaxConnsDefault.
	MaxConns int
	// GroupCommitMax is the most inserts or completions coalesced into one
	// commit. Defaults to GroupCommitMaxDefault.
	GroupCommitMax int
	// PollInterval is how often PostgreSQL wakes Notify subscribers when
	// LISTEN is unavailable. Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// Clock times the poll fallback. Defaults to the wall clock.
	Clock clock.Clock
}

// WithDefaults returns o with every unset field filled in.
func (o Options) WithDefaults() Options {
	o.ReadConns = cmp.Or(o.ReadConns, ReadConnsDefault)
	o.BusyTimeout = cmp.Or(o.BusyTimeout, BusyTimeoutDefault)
	o.MaxConns = cmp.Or(o.MaxConns, MaxConnsDefault)
	o.GroupCommitMax = cmp.Or(o.GroupCommitMax, GroupCommitMaxDefault)
	o.PollInterval = cmp.Or(o.PollInterval, PollIntervalDefault)
	o.Clock = clock.Or(o.Clock)
	return o
}

func (o Options) validate() error {
	switch {
	case o.ReadConns < 1:
		return fmt.Errorf("ReadConns: %d is below 1", o.ReadConns)
	case o.BusyTimeout < 0:
		return fmt.Errorf("BusyTimeout: %v is negative", o.BusyTimeout)
	case o.MaxConns < 2:
		return fmt.Errorf("MaxConns: %d is below 2", o.MaxConns)
	case o.GroupCommitMax < 1:
		return fmt.Errorf("GroupCommitMax: %d is below 1", o.GroupCommitMax)
	case o.PollInterval <= 0:
		return fmt.Errorf("PollInterval: %v is not positive", o.PollInterval)
	}
	return nil
}

// dialect is a store backend.
type dialect string

const (
	dialectSQLite   dialect = "sqlite"
	dialectPostgres dialect = "postgres"
)

// errBadDSN marks a store address that cannot be parsed.
var errBadDSN = errors.New("bad store address")

// parseDSN splits a store address: "sqlite:PATH" (PATH may be a file name
// or "file:" URI-less path) or "postgres://…" / "postgresql://…".
func parseDSN(dsn string) (dialect, string, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return dialectPostgres, dsn, nil
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if path == "" {
			return "", "", fmt.Errorf("%w: %q has no file path (want sqlite:PATH)", errBadDSN, dsn)
		}
		if strings.ContainsAny(path, "?#\x00") || strings.HasPrefix(path, ":memory:") {
			return "", "", fmt.Errorf("%w: %q: the sqlite path must be a plain file name", errBadDSN, dsn)
		}
		return dialectSQLite, path, nil
	}
	return "", "", fmt.Errorf("%w: %q (want sqlite:PATH or postgres://…)", errBadDSN, dsn)
}

// Open opens the store named by dsn ("sqlite:PATH" or "postgres://…"),
// checks its schema (ErrSchemaTooNew when a newer Sluice migrated it) and,
// unless NoMigrate is set, migrates it up.
func Open(ctx context.Context, dsn string, opts Options) (Store, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	d, addr, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	var st Store
	switch d {
	case dialectSQLite:
		if err := checkSQLiteDir(addr); err != nil {
			return nil, fmt.Errorf("opening store: sqlite:%s: %w", addr, err)
		}
		st, err = openSQLite(ctx, addr, opts)
	default:
		st, err = openPostgres(ctx, addr, opts)
	}
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	return withEdge(st), nil
}

// checkSQLiteDir explains, before SQLite's "unable to open database file
// (14)", why a store file cannot be created or written: its directory is
// missing, is not a directory, or is not writable (SQLite also writes its
// -wal and -shm files there).
func checkSQLiteDir(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("the directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("the directory %s cannot be read: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	// Probe by creating a file: permission bits do not tell about
	// read-only mounts, ACLs or another user's ownership.
	f, err := os.CreateTemp(dir, ".sluice-probe-*")
	if err != nil {
		reason := "permission denied"
		switch {
		case errors.Is(err, syscall.EROFS):
			reason = "read-only file system"
		case errors.Is(err, syscall.ENOSPC):
			reason = "no space left on device"
		case !errors.Is(err, os.ErrPermission):
			reason = err.Error()
		}
		return fmt.Errorf("the directory %s is not writable (%s)", dir, reason)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	fi, err = os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // created on open
	case err != nil:
		return fmt.Errorf("the file %s cannot be read: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	}
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("the file %s is not writable (%w)", path, err)
	}
	return f.Close()
}
