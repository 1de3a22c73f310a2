package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/internal/scenario"
)

func init() {
	register(command{
		name:    "demo",
		summary: "run the gateway against a simulated provider, side by side with a naive client (no config, no network)",
		usage:   "[--requests N] [--seed N] [--quick]",
		run:     runDemo,
	})
}

func runDemo(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	requests := fs.Int("requests", scenario.RequestsDefault, "number of requests in the workload")
	seed := fs.Uint64("seed", scenario.SeedDefault, "seed of the workload, the simulated faults and the retry jitter")
	quick := fs.Bool("quick", false, "a smaller, faster run (300 requests)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *requests < 1 {
		return fmt.Errorf("%w: --requests must be >= 1, got %d", errUsage, *requests)
	}
	n := *requests
	if *quick && !flagGiven(fs, "requests") {
		n = 0 // the quick size
	}
	r, err := scenario.Demo(ctx, scenario.Options{Seed: *seed, Quick: *quick, Requests: n, Progress: os.Stderr})
	if err != nil {
		return err
	}
	return r.WriteText(out)
}

// flagGiven reports whether the flag was given on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
