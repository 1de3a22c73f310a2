package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/scenario"
)

func init() {
	names, long := []string{}, []string{}
	for _, s := range scenario.Scenarios() {
		names = append(names, s.Name)
		if s.Long {
			long = append(long, s.Name)
		}
	}
	register(command{
		name:    "bench",
		summary: "measure the gateway against a naive client on an in-process mock: " + strings.Join(names, ", ") + ", all (every one but " + strings.Join(long, ", ") + ")",
		usage: "[--seed N] [--quick] [--duration D] [--requests N] [--preset P] [--max-tokens N] [--learn-limits] [--output-reservation R] [--otpm-mode M] [--rates R,R] [--rounds N] [--round D] " +
			"[--trace NAME_OR_FILE[:class[:scale]]]... [--from D] [--window D] [--speed X] [--token-scale X] [--batch N[:class]] [--batch-mean N] [--limits rpm,itpm,otpm] [--burst-seconds S] [--profile P] [--timeout D] [--batch-timeout D] [--ttft D] [--per-token D] [--json] <scenario>",
		run:  runBench,
		subs: append(names, "all"),
	})
}

func runBench(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	seed := fs.Uint64("seed", scenario.SeedDefault, "seed of workloads, simulated faults and retry jitter")
	quick := fs.Bool("quick", false, "tiny sizes: a smoke run in seconds (figures not comparable with the targets)")
	duration := fs.Duration("duration", scenario.LoadDurationDefault, "how long the priority scenario overloads")
	requests := fs.Int("requests", 0, "override the scenario's request count (goodput, overhead pairs, mock)")
	preset := fs.String("preset", "", "goodput: a named size instead of the scenario's own ("+strings.Join(slices.Sorted(maps.Keys(scenario.GoodputPresets)), ", ")+
		"); trace: the mock's limit table instead of --limits (e.g. anthropic-tier4)")
	maxTokens := fs.Int("max-tokens", 0, "goodput: each request's max_tokens (default 200; the replies' lengths keep their distribution)")
	learnLimits := fs.Bool("learn-limits", false, "goodput: configure no limits on the gateway's upstream, so it learns them from the mock's rate-limit headers")
	reservation := fs.String("output-reservation", "", "goodput, trace: the gateway's output_reservation, max_tokens or learned (default max_tokens)")
	otpmMode := fs.String("otpm-mode", "", "goodput, trace: the mock's output accounting, reserve_max_tokens or realtime (goodput: default realtime with --output-reservation learned; else reserve_max_tokens)")
	rates := fs.String("rates", "", "overhead: open-loop rates in req/s, comma-separated (default 500,1000,2000)")
	rounds := fs.Int("rounds", 0, "overhead: rounds per system and rate; figures are medians (default 3)")
	round := fs.Duration("round", 0, "overhead: length of one round (default 5s)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile at the end of the run to this file")
	asJSON := fs.Bool("json", false, "also print the results as JSON after the text report")
	tf := addTraceFlags(fs)
	// Accept flags after the scenario name too: sluice bench goodput --quick.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if fs.NArg() > 1 {
			return fmt.Errorf("%w: one scenario expected, got %q", errUsage, strings.Join(fs.Args(), " "))
		}
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: one scenario expected, got extra %q", errUsage, strings.Join(fs.Args(), " "))
	}
	if name == "" {
		return fmt.Errorf("%w: name a scenario (goodput, priority, outage, overhead, mock, batch-route, trace or all)", errUsage)
	}
	if *duration <= 0 {
		return fmt.Errorf("%w: --duration must be positive, got %v", errUsage, *duration)
	}
	if *requests < 0 {
		return fmt.Errorf("%w: --requests must be >= 0, got %d", errUsage, *requests)
	}
	if *maxTokens < 0 {
		return fmt.Errorf("%w: --max-tokens must be >= 0, got %d", errUsage, *maxTokens)
	}
	if *rounds < 0 || *round < 0 {
		return fmt.Errorf("%w: --rounds and --round must be >= 0", errUsage)
	}
	rateList, err := parseRates(*rates)
	if err != nil {
		return err
	}
	goodputPreset := *preset
	var replay scenario.ReplayOptions
	if name == "trace" {
		goodputPreset = "" // --preset is the mock's limit table here
		if replay, err = tf.options(fs, *preset); err != nil {
			return err
		}
	}
	var scenarios []scenario.Scenario
	if name == "all" {
		for _, s := range scenario.Scenarios() {
			if !s.Long {
				scenarios = append(scenarios, s)
			}
		}
	} else {
		s, err := scenario.Lookup(name)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		scenarios = []scenario.Scenario{s}
	}
	opts := scenario.Options{Seed: *seed, Quick: *quick, Requests: *requests, Progress: os.Stderr,
		Rates: rateList, Rounds: *rounds, Round: *round,
		GoodputPreset: goodputPreset, MaxTokens: *maxTokens, LearnLimits: *learnLimits, OutputReservation: *reservation, OTPMMode: *otpmMode,
		Replay: replay}
	if flagGiven(fs, "duration") || !*quick {
		opts.Duration = *duration
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("creating CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer func() {
			f, err := os.Create(*memProfile)
			if err != nil {
				fmt.Fprintf(os.Stderr, "creating allocation profile: %v\n", err)
				return
			}
			defer f.Close()
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
		}()
	}
	var results []*scenario.Result
	missed := 0
	for _, s := range scenarios {
		r, err := s.Run(ctx, opts)
		if _, ok := errors.AsType[*scenario.OptionsError](err); ok {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if err != nil {
			return err
		}
		if err := r.WriteText(out); err != nil {
			return err
		}
		if !r.Met() {
			missed++
		}
		results = append(results, r)
	}
	if *asJSON {
		if err := scenario.WriteJSON(out, results); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "%d of %d scenarios met every target\n", len(results)-missed, len(results))
	return nil
}

// parseRates reads --rates: positive integers separated by commas.
func parseRates(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: --rates wants positive integers separated by commas, got %q", errUsage, s)
		}
		out = append(out, n)
	}
	return out, nil
}
