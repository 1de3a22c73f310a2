package jobstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations
var migrationFS embed.FS

// migration is one numbered schema step, as NNNN_name.{up,down}.sql.
type migration struct {
	Version  int
	Name     string
	Up, Down string
}

// loadMigrations reads a dialect's embedded migrations in version order.
func loadMigrations(d dialect) ([]migration, error) {
	dir := path.Join("migrations", string(d))
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	byVersion := map[int]*migration{}
	for _, e := range entries {
		name := e.Name()
		base, dir2, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		num, label, ok2 := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil || (dir2 != "up" && dir2 != "down") {
			return nil, fmt.Errorf("reading migrations: bad file name %q", name)
		}
		body, err := fs.ReadFile(migrationFS, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		m := byVersion[v]
		if m == nil {
			m = &migration{Version: v, Name: label}
			byVersion[v] = m
		}
		if dir2 == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	// Versions may leave gaps (parallel branches number their steps ahead
	// of each other): every known version not applied yet is pending.
	for _, m := range out {
		if m.Version < 1 || m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("reading migrations: version %d lacks its up or down file", m.Version)
		}
	}
	return out, nil
}

// migrationConn is what a backend gives the migrator.
type migrationConn interface {
	// applied creates the version table if needed and lists applied
	// versions in order.
	applied(ctx context.Context) ([]AppliedMigration, error)
	// apply runs sql and records (up) or forgets (down) version in one
	// transaction.
	apply(ctx context.Context, m migration, up bool, now time.Time) error
	close() error
}

// AppliedMigration is one row of the version table.
type AppliedMigration struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// MigrationStatus describes a database's schema against the code.
type MigrationStatus struct {
	// Current is the highest applied version (0 for an empty database).
	Current int
	// Latest is the highest version this code knows.
	Latest int
	// Applied lists the applied versions.
	Applied []AppliedMigration
	// Pending lists the versions Up would apply, as "NNNN_name".
	Pending []string
}

// Migrator applies and reverts a store's schema migrations.
type Migrator struct {
	conn migrationConn
	all  []migration
}

// MigratorOption changes how OpenMigrator opens a store.
type MigratorOption func(*migratorOptions)

type migratorOptions struct {
	existing bool
}

// ExistingStore makes OpenMigrator fail with ErrNoStore, creating nothing,
// when the store does not exist yet (a SQLite file not there): for reads
// (status) and reverts, which have nothing to do on a store never made.
// A PostgreSQL database always exists once it can be connected to.
func ExistingStore() MigratorOption {
	return func(o *migratorOptions) { o.existing = true }
}

// OpenMigrator connects to the store named by dsn without touching its
// schema. A SQLite file that does not exist is created, unless
// ExistingStore is given.
func OpenMigrator(ctx context.Context, dsn string, options ...MigratorOption) (*Migrator, error) {
	var o migratorOptions
	for _, opt := range options {
		opt(&o)
	}
	d, addr, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("opening migrator: %w", err)
	}
	if d == dialectSQLite && o.existing {
		if _, err := os.Stat(addr); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w at %s (nothing applied yet)", ErrNoStore, addr)
		}
	}
	all, err := loadMigrations(d)
	if err != nil {
		return nil, err
	}
	opts := Options{}.WithDefaults()
	var conn migrationConn
	switch d {
	case dialectSQLite:
		conn, err = openSQLiteMigrationConn(ctx, addr, opts)
	default:
		conn, err = openPostgresMigrationConn(ctx, addr, opts)
	}
	if err != nil {
		return nil, err
	}
	return &Migrator{conn: conn, all: all}, nil
}

// Close releases the migrator's connection.
func (m *Migrator) Close() error { return m.conn.close() }

// Status reports applied and pending versions.
func (m *Migrator) Status(ctx context.Context) (MigrationStatus, error) {
	applied, err := m.conn.applied(ctx)
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("reading schema version: %w", err)
	}
	st := MigrationStatus{Applied: applied}
	if n := len(m.all); n > 0 {
		st.Latest = m.all[n-1].Version
	}
	done := map[int]bool{}
	for _, a := range applied {
		done[a.Version] = true
		st.Current = max(st.Current, a.Version)
	}
	for _, mg := range m.pending(done) {
		st.Pending = append(st.Pending, fmt.Sprintf("%04d_%s", mg.Version, mg.Name))
	}
	return st, nil
}

// pending lists the known migrations not in done, in version order.
func (m *Migrator) pending(done map[int]bool) []migration {
	var out []migration
	for _, mg := range m.all {
		if !done[mg.Version] {
			out = append(out, mg)
		}
	}
	return out
}

// Up applies every pending migration and returns their versions. It fails
// with ErrSchemaTooNew when the database is ahead of the code.
func (m *Migrator) Up(ctx context.Context, now time.Time) ([]int, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current > st.Latest {
		return nil, fmt.Errorf("%w: database at version %d, this sluice knows %d", ErrSchemaTooNew, st.Current, st.Latest)
	}
	applied := map[int]bool{}
	for _, a := range st.Applied {
		applied[a.Version] = true
	}
	var done []int
	for _, mg := range m.pending(applied) {
		if err := m.conn.apply(ctx, mg, true, now); err != nil {
			return done, fmt.Errorf("applying migration %04d_%s: %w", mg.Version, mg.Name, err)
		}
		done = append(done, mg.Version)
	}
	return done, nil
}

// Down reverts the last steps applied migrations (at least one) and
// returns their versions, newest first.
func (m *Migrator) Down(ctx context.Context, steps int, now time.Time) ([]int, error) {
	if steps < 1 {
		return nil, fmt.Errorf("%w: steps: %d is below 1", ErrInvalid, steps)
	}
	st, err := m.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Current > st.Latest {
		return nil, fmt.Errorf("%w: database at version %d, this sluice knows %d", ErrSchemaTooNew, st.Current, st.Latest)
	}
	byVersion := map[int]migration{}
	for _, mg := range m.all {
		byVersion[mg.Version] = mg
	}
	var done []int
	for i := len(st.Applied) - 1; i >= 0 && len(done) < steps; i-- {
		v := st.Applied[i].Version
		mg, ok := byVersion[v]
		if !ok {
			return done, fmt.Errorf("%w: database has version %d, which this sluice does not know", ErrSchemaTooNew, v)
		}
		if err := m.conn.apply(ctx, mg, false, now); err != nil {
			return done, fmt.Errorf("reverting migration %04d_%s: %w", mg.Version, mg.Name, err)
		}
		done = append(done, v)
	}
	return done, nil
}

// ensureSchema is Open's check: fail when the schema is too new, migrate
// up when behind unless noMigrate.
func ensureSchema(ctx context.Context, conn migrationConn, d dialect, noMigrate bool, now time.Time) error {
	all, err := loadMigrations(d)
	if err != nil {
		return err
	}
	m := &Migrator{conn: conn, all: all}
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	switch {
	case st.Current > st.Latest:
		return fmt.Errorf("%w: database at version %d, this sluice knows %d", ErrSchemaTooNew, st.Current, st.Latest)
	case len(st.Pending) == 0:
		return nil
	case noMigrate:
		return fmt.Errorf("database schema at version %d, this sluice needs %d: run 'sluice migrate up'", st.Current, st.Latest)
	}
	_, err = m.Up(ctx, now)
	return err
}
