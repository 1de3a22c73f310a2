package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/jobstore"
)

func init() {
	register(command{
		name:    "migrate",
		summary: "Apply, revert or show the job store's schema migrations.",
		usage:   "[--store DSN] [--steps N] up|down|status",
		run:     runMigrate,
		subs:    []string{"up", "down", "status"},
	})
}

func runMigrate(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	store := fs.String("store", jobstore.DSNDefault, "job store: sqlite:PATH or postgres://…")
	steps := fs.Int("steps", 1, "how many migrations down reverts")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: want exactly one of up, down, status", errUsage)
	}
	action := fs.Arg(0)
	switch action {
	case "up", "down", "status":
	default:
		return fmt.Errorf("%w: unknown action %q (want up, down or status)", errUsage, action)
	}
	if *steps < 1 {
		return fmt.Errorf("%w: --steps must be at least 1", errUsage)
	}
	var opts []jobstore.MigratorOption
	if action != "up" {
		// A read, or a revert of nothing: a store not there stays so.
		opts = append(opts, jobstore.ExistingStore())
	}
	m, err := jobstore.OpenMigrator(ctx, *store, opts...)
	if errors.Is(err, jobstore.ErrNoStore) {
		if action == "down" {
			fmt.Fprintf(out, "nothing to revert (%v)\n", err)
		} else {
			fmt.Fprintln(out, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer m.Close()
	now := clock.Real().Now()
	switch action {
	case "up":
		done, err := m.Up(ctx, now)
		if err != nil {
			return err
		}
		if len(done) == 0 {
			fmt.Fprintln(out, "schema is up to date")
		}
		for _, v := range done {
			fmt.Fprintf(out, "applied %04d\n", v)
		}
	case "down":
		done, err := m.Down(ctx, *steps, now)
		if err != nil {
			return err
		}
		if len(done) == 0 {
			fmt.Fprintln(out, "nothing to revert")
		}
		for _, v := range done {
			fmt.Fprintf(out, "reverted %04d\n", v)
		}
	default:
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "current version: %d\nlatest version:  %d\n", st.Current, st.Latest)
		for _, a := range st.Applied {
			fmt.Fprintf(out, "applied  %04d_%s  %s\n", a.Version, a.Name, a.AppliedAt.Format("2006-01-02T15:04:05Z07:00"))
		}
		if len(st.Pending) > 0 {
			fmt.Fprintf(out, "pending  %s\n", strings.Join(st.Pending, ", "))
		}
		if st.Current > st.Latest {
			return fmt.Errorf("%w: database at version %d, this sluice knows %d", jobstore.ErrSchemaTooNew, st.Current, st.Latest)
		}
	}
	return nil
}
