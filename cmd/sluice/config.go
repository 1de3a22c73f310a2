package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/internal/server"
)

func init() {
	register(command{
		name:    "config",
		summary: "check a gateway config file: a mistake is one line (file:line: field: what to change) and exit 1",
		usage:   "check [--config FILE]",
		subs:    []string{"check", "validate"},
		run:     runConfig,
	})
}

// runConfig runs `sluice config check` (alias validate): it loads the
// file as `sluice serve` would (environment references expanded,
// defaults filled, every field validated) without starting anything.
func runConfig(_ context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	configFlag := fs.String("config", "", "YAML config `file` to check (default $SLUICE_CONFIG)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return fmt.Errorf("%w: want a subcommand: check", errUsage)
	case fs.Arg(0) != "check" && fs.Arg(0) != "validate":
		return fmt.Errorf("%w: unknown subcommand %q (want check)", errUsage, fs.Arg(0))
	case fs.NArg() > 1:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(1))
	}
	path := configFile(*configFlag, os.LookupEnv)
	if path == "" {
		return fmt.Errorf("%w: --config FILE (or $SLUICE_CONFIG) is required", errUsage)
	}
	cfg, err := server.LoadConfig(path, os.LookupEnv)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: ok: %s\n", path, describeUpstreams(cfg))
	return nil
}
