// Command queuebench runs Sluice's durable job store (PostgreSQL and SQLite
// backends) and River side by side on one machine, with a no-op worker, and
// prints a table of the figures and the ratios to River:
//
//   - drain: a backlog of -backlog jobs inserted up front (not timed), then
//     worked to the end;
//   - sustained: -submitters goroutines insert one job per call for
//     -duration while the workers complete them; completions per second;
//   - pickup: the time from an insert returning to an idle worker starting
//     the job, p50 and p99 over -pickups jobs.
//
// Every system runs in its own fresh PostgreSQL schema (SQLite: its own
// file), with fsync on. The systems take turns: -runs rounds, each system
// once per round, every scenario on a fresh instance; the median is
// printed.
//
//	cd bench && go run ./cmd/queuebench -duration 10s -runs 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// system is one job queue under test. Every method is called on a fresh
// instance made by its factory for one scenario run.
type system interface {
	// fill inserts n jobs (not timed; no worker runs yet).
	fill(ctx context.Context, n int) error
	// start runs the workers; started is called when a worker starts a job
	// and done when its completion is durable.
	start(ctx context.Context, started func(), done func()) error
	// submit inserts one job.
	submit(ctx context.Context) error
	// close stops the workers and releases everything.
	close() error
}

type factory struct {
	name string
	open func(ctx context.Context, cfg config) (system, error)
	// drainOnly systems are not job queues (the bare pattern): they run
	// the drain alone, and the other columns print "-".
	drainOnly bool
}

type config struct {
	postgres   string
	backlog    int
	duration   time.Duration
	submitters int
	pickups    int
	workers    int
	runs       int
	tmp        string
	scenarios  map[string]bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "queuebench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("queuebench", flag.ContinueOnError)
	var cfg config
	var systems, scenarios string
	fs.StringVar(&cfg.postgres, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL address (schemas queuebench_* are created and dropped)")
	fs.IntVar(&cfg.backlog, "backlog", 50_000, "jobs in the drain backlog")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of the sustained run")
	fs.IntVar(&cfg.submitters, "submitters", 16, "concurrent submitters in the sustained run")
	fs.IntVar(&cfg.pickups, "pickups", 300, "jobs timed in the pickup run")
	fs.IntVar(&cfg.workers, "workers", 1000, "jobs in flight at once per system (River's MaxWorkers)")
	fs.IntVar(&cfg.runs, "runs", 1, "runs of each scenario; the median is printed")
	fs.StringVar(&systems, "systems", "river,sluice-postgres,sluice-sqlite", "systems to run, comma separated (also sluice-postgres-claim: no handoffs, the claim path alone; bare-postgres: the ceiling of claim and complete statements with no client overhead, bare-postgres-claims: of claims alone, see bare.go)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file")
	fs.StringVar(&scenarios, "scenarios", "drain,sustained,pickup", "scenarios to run, comma separated (the others print as 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cfg.scenarios = map[string]bool{}
	for _, name := range strings.Split(scenarios, ",") {
		name = strings.TrimSpace(name)
		if name != "drain" && name != "sustained" && name != "pickup" {
			return fmt.Errorf("unknown scenario %q (want drain, sustained or pickup)", name)
		}
		cfg.scenarios[name] = true
	}
	if cfg.backlog < 1 || cfg.submitters < 1 || cfg.pickups < 1 || cfg.workers < 1 || cfg.runs < 1 || cfg.duration <= 0 {
		return errors.New("-backlog, -submitters, -pickups, -workers, -runs and -duration must be positive")
	}
	all := []factory{{"river", openRiver, false}, {"sluice-postgres", openSluicePostgres, false}, {"sluice-sqlite", openSluiceSQLite, false},
		{"sluice-postgres-claim", withoutHandoff(openSluicePostgres), false}, {"bare-postgres", openBarePostgres, true},
		{"bare-postgres-claims", bareClaimsOnly, true}}
	var chosen []factory
	for _, name := range strings.Split(systems, ",") {
		i := slices.IndexFunc(all, func(f factory) bool { return f.name == strings.TrimSpace(name) })
		if i < 0 {
			return fmt.Errorf("unknown system %q (want river, sluice-postgres, sluice-sqlite, sluice-postgres-claim, bare-postgres or bare-postgres-claims)", name)
		}
		if slices.ContainsFunc(chosen, func(f factory) bool { return f.name == all[i].name }) {
			return fmt.Errorf("system %q is listed twice", all[i].name)
		}
		chosen = append(chosen, all[i])
	}
	tmp, err := os.MkdirTemp("", "queuebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.tmp = tmp
	ctx := context.Background()
	fmt.Printf("queuebench: backlog %d, sustained %v with %d submitters, %d pickups, %d in flight, median of %d round(s), systems taking turns\n\n",
		cfg.backlog, cfg.duration, cfg.submitters, cfg.pickups, cfg.workers, cfg.runs)
	// Rounds: every system once per round, so a machine that speeds up or
	// slows down over the minutes of a run moves all systems alike (run
	// system by system, a shared machine's drift showed up as ratios).
	runs := map[string][]result{}
	for round := range cfg.runs {
		// Each round starts one system further on, so none always runs
		// first (on a machine still settling) or last.
		for k := range chosen {
			f := chosen[(round+k)%len(chosen)]
			r, err := measureOnce(ctx, f, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			runs[f.name] = append(runs[f.name], r)
			fmt.Fprintf(os.Stderr, "round %d, %s: %s\n", round+1, f.name, r)
		}
	}
	res := map[string]result{}
	for name, rs := range runs {
		res[name] = medianResult(rs)
	}
	printTable(chosen, res)
	return nil
}

// result holds the medians of one system.
type result struct {
	drain, sustained, p50, p99 float64
}

func (r result) String() string {
	return fmt.Sprintf("drain %.0f/s, sustained %.0f/s, pickup p50 %.2f ms p99 %.2f ms", r.drain, r.sustained, r.p50, r.p99)
}

// measureOnce runs each chosen scenario once on fresh instances of f.
func measureOnce(ctx context.Context, f factory, cfg config) (result, error) {
	var r result
	var err error
	if cfg.scenarios["drain"] {
		if r.drain, err = withSystem(ctx, f, cfg, func(s system) (float64, error) { return drain(ctx, s, cfg) }); err != nil {
			return result{}, fmt.Errorf("drain: %w", err)
		}
	}
	if cfg.scenarios["sustained"] && !f.drainOnly {
		if r.sustained, err = withSystem(ctx, f, cfg, func(s system) (float64, error) { return sustained(ctx, s, cfg) }); err != nil {
			return result{}, fmt.Errorf("sustained: %w", err)
		}
	}
	if cfg.scenarios["pickup"] && !f.drainOnly {
		_, err = withSystem(ctx, f, cfg, func(s system) (float64, error) {
			r.p50, r.p99, err = pickup(ctx, s, cfg)
			return 0, err
		})
		if err != nil {
			return result{}, fmt.Errorf("pickup: %w", err)
		}
	}
	return r, nil
}

// medianResult is the median of each figure over rs.
func medianResult(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	return result{
		drain:     pick(func(r result) float64 { return r.drain }),
		sustained: pick(func(r result) float64 { return r.sustained }),
		p50:       pick(func(r result) float64 { return r.p50 }),
		p99:       pick(func(r result) float64 { return r.p99 }),
	}
}

func withSystem(ctx context.Context, f factory, cfg config, fn func(system) (float64, error)) (float64, error) {
	s, err := f.open(ctx, cfg)
	if err != nil {
		return 0, err
	}
	v, err := fn(s)
	return v, errors.Join(err, s.close())
}

// drain fills a backlog, then times the workers through it.
func drain(ctx context.Context, s system, cfg config) (float64, error) {
	if err := s.fill(ctx, cfg.backlog); err != nil {
		return 0, err
	}
	var n atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	err := s.start(ctx, func() {}, func() {
		if n.Add(1) == int64(cfg.backlog) {
			close(all)
		}
	})
	if err != nil {
		return 0, err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("drain stuck at %d of %d", n.Load(), cfg.backlog)
	}
	return float64(cfg.backlog) / time.Since(start).Seconds(), nil
}

// sustained runs submitters for cfg.duration while the workers complete
// jobs, and returns completions per second over that window.
func sustained(ctx context.Context, s system, cfg config) (float64, error) {
	var done atomic.Int64
	if err := s.start(ctx, func() {}, func() { done.Add(1) }); err != nil {
		return 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, cfg.submitters)
	start := time.Now()
	before := done.Load()
	for range cfg.submitters {
		wg.Go(func() {
			for sctx.Err() == nil {
				if err := s.submit(sctx); err != nil && sctx.Err() == nil {
					errs <- err
					return
				}
			}
		})
	}
	<-sctx.Done()
	completed := done.Load() - before
	elapsed := time.Since(start)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(completed) / elapsed.Seconds(), nil
}

// pickup inserts one job at a time into an idle system and times the gap
// from the insert returning to a worker starting the job.
func pickup(ctx context.Context, s system, cfg config) (p50, p99 float64, err error) {
	started := make(chan time.Time, 1)
	if err := s.start(ctx, func() { started <- time.Now() }, func() {}); err != nil {
		return 0, 0, err
	}
	lat := make([]float64, 0, cfg.pickups)
	for range cfg.pickups {
		time.Sleep(5 * time.Millisecond) // let the workers go idle
		if err := s.submit(ctx); err != nil {
			return 0, 0, err
		}
		inserted := time.Now()
		select {
		case at := <-started:
			lat = append(lat, float64(max(at.Sub(inserted), 0).Microseconds())/1000)
		case <-time.After(10 * time.Second):
			return 0, 0, errors.New("job not picked up within 10s")
		}
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// median is the middle value of v, or the mean of the two middle values
// when there is an even number of them.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func printTable(systems []factory, res map[string]result) {
	river, haveRiver := res["river"]
	ratio := func(v, ref float64) string {
		if !haveRiver || ref == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2fx)", v/ref)
	}
	fmt.Printf("%-22s %22s %22s %20s %20s\n", "system", "drain jobs/s", "sustained jobs/s", "pickup p50 ms", "pickup p99 ms")
	for _, f := range systems {
		r := res[f.name]
		sustained := fmt.Sprintf("%.0f%s", r.sustained, ratio(r.sustained, river.sustained))
		p50 := fmt.Sprintf("%.2f%s", r.p50, ratio(r.p50, river.p50))
		p99 := fmt.Sprintf("%.2f%s", r.p99, ratio(r.p99, river.p99))
		if f.drainOnly {
			sustained, p50, p99 = "-", "-", "-"
		}
		fmt.Printf("%-22s %22s %22s %20s %20s\n", f.name,
			fmt.Sprintf("%.0f%s", r.drain, ratio(r.drain, river.drain)), sustained, p50, p99)
	}
	if haveRiver {
		fmt.Println("\nratios are to River: above 1x is faster for jobs/s, slower for pickup ms")
	}
}
