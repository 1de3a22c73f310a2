package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/sluicehq/sluice/internal/scenario"
)

func init() {
	register(command{
		name:    "demo",
		summary: "run the gateway against a simulated provider, side by side with a naive client (no config, no network)",
		usage:   "[--requests N] [--seed N] [--quick] [--keep]",
		run:     runDemo,
	})
}

func runDemo(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	requests := fs.Int("requests", scenario.RequestsDefault, "number of requests in the workload")
	seed := fs.Uint64("seed", scenario.SeedDefault, "seed of the workload, the simulated faults and the retry jitter")
	quick := fs.Bool("quick", false, "a smaller, faster run (300 requests)")
	keep := fs.Bool("keep", false, "leave the gateway and the mock provider running after the run (Ctrl-C stops them), and print their URLs")
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
	o := scenario.Options{Seed: *seed, Quick: *quick, Requests: n, Progress: stderrOf(ctx)}
	var gwURL, mockURL string
	if *keep {
		o.Keep = &scenario.Keep{Started: func(g, m string) {
			gwURL, mockURL = g, m
			fmt.Fprintf(o.Progress, "demo: gateway at %s (dashboard %s/ui), mock provider at %s\n", g, g, m)
		}}
		defer func() { _ = o.Keep.Stop(context.WithoutCancel(ctx)) }()
	}
	r, err := scenario.Demo(ctx, o)
	if err != nil {
		return err
	}
	if err := r.WriteText(out); err != nil {
		return err
	}
	if !*keep {
		return nil
	}
	fmt.Fprintf(out, "\nStill running (--keep); Ctrl-C stops them:\n"+
		"  gateway    %s   (Anthropic at %s/anthropic, OpenAI at %s/openai, no key needed)\n"+
		"  dashboard  %s/ui\n  status     %s/v1/status\n  metrics    %s/metrics\n  mock       %s   (stats at %s/mock/stats)\n",
		gwURL, gwURL, gwURL, gwURL, gwURL, gwURL, mockURL, mockURL)
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the gateway and the mock")
	return nil
}

// flagGiven reports whether the flag was given on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
