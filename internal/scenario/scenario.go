package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/mock"
	"github.com/sluicehq/sluice/internal/opsview"
	"github.com/sluicehq/sluice/upstream"
)

// Option defaults.
const (
	// SeedDefault seeds workloads, the mock and the naive client's jitter.
	SeedDefault uint64 = 1
	// LoadDurationDefault is how long the priority scenario overloads.
	LoadDurationDefault = 60 * time.Second
)

// Options tune a scenario run.
type Options struct {
	// Seed makes workloads and faults reproducible. Defaults to
	// SeedDefault.
	Seed uint64
	// Quick shrinks every size so a run takes seconds (smoke tests, a
	// first look); figures are then not comparable with the targets.
	// Defaults to false.
	Quick bool
	// Requests overrides the scenario's request count (demo, goodput,
	// overhead, mock). Defaults to the scenario's own.
	Requests int
	// Duration overrides the priority scenario's overload time. Defaults to
	// LoadDurationDefault (a few seconds with Quick).
	Duration time.Duration
	// Rates are the overhead scenario's open-loop arrival rates in
	// requests per second. Defaults to OverheadRatesDefault.
	Rates []int
	// Rounds is how many rounds each system runs per rate in the overhead
	// scenario. Defaults to OverheadRoundsDefault.
	Rounds int
	// Round is how long one overhead round sends. Defaults to
	// OverheadRoundDefault.
	Round time.Duration
	// GoodputPreset sizes the goodput scenario: "" for its own 1,500
	// requests or a name from GoodputPresets. Defaults to "".
	GoodputPreset string
	// MaxTokens overrides the goodput workload's max_tokens (the mock's
	// reply lengths keep their distribution, cut at it). Defaults to the
	// scenario's own (200).
	MaxTokens int
	// LearnLimits starts the goodput scenario's gateway with no limits
	// configured, so it learns them from the provider's rate-limit
	// headers. Defaults to false (limits set to the mock's).
	LearnLimits bool
	// OutputReservation is the goodput and trace gateways'
	// output_reservation (max_tokens or learned). Defaults to the
	// gateway's own default.
	OutputReservation string
	// OTPMMode is the goodput and trace mocks' output accounting
	// (mock.OTPMReserve or mock.OTPMRealtime; the trace's oracles follow
	// it). Defaults, for goodput, to realtime with a learned output
	// reservation, else to the mock's default (reserve max_tokens).
	OTPMMode string
	// Replay configures the trace scenario. Defaults to issue 22's case
	// (ReplayOptions).
	Replay ReplayOptions
	// Clock times the runs. Defaults to the wall clock.
	Clock clock.Clock
	// Progress receives a line as each phase starts. Defaults to
	// io.Discard.
	Progress io.Writer
	// Keep, when not nil, keeps the gateway side's gateway and mock
	// running after the run (sluice demo --keep): they are handed to Keep,
	// whose Stop stops them. Defaults to nil (stopped with the run).
	Keep *Keep
}

// Keep holds the servers of a run kept running after it.
type Keep struct {
	// Started, when not nil, is called as soon as the gateway serves, with
	// its URL and the mock provider's.
	Started func(gatewayURL, mockURL string)

	mu   sync.Mutex
	stop stopper
}

func (k *Keep) hold(s stopper) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stop = append(k.stop, s...)
}

// Stop stops what was kept, the last started first.
func (k *Keep) Stop(ctx context.Context) error {
	k.mu.Lock()
	s := k.stop
	k.stop = nil
	k.mu.Unlock()
	return s.stop(ctx)
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Seed = cmp.Or(o.Seed, SeedDefault)
	o.Clock = clock.Or(o.Clock)
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Requests < 0:
		return fmt.Errorf("Requests must be >= 0, got %d", o.Requests)
	case o.Duration < 0:
		return fmt.Errorf("Duration must be >= 0, got %v", o.Duration)
	case o.Rounds < 0:
		return fmt.Errorf("Rounds must be >= 0, got %d", o.Rounds)
	case o.Round < 0:
		return fmt.Errorf("Round must be >= 0, got %v", o.Round)
	case o.MaxTokens < 0:
		return fmt.Errorf("MaxTokens must be >= 0, got %d", o.MaxTokens)
	}
	if o.GoodputPreset != "" {
		if _, ok := GoodputPresets[o.GoodputPreset]; !ok {
			return fmt.Errorf("GoodputPreset must be one of %s, got %q", strings.Join(goodputPresetNames(), ", "), o.GoodputPreset)
		}
	}
	switch o.OutputReservation {
	case "", upstream.OutputReservationMaxTokens, upstream.OutputReservationLearned:
	default:
		return fmt.Errorf("OutputReservation must be %q or %q, got %q",
			upstream.OutputReservationMaxTokens, upstream.OutputReservationLearned, o.OutputReservation)
	}
	switch o.OTPMMode {
	case "", mock.OTPMReserve, mock.OTPMRealtime:
	default:
		return fmt.Errorf("OTPMMode must be %q or %q, got %q", mock.OTPMReserve, mock.OTPMRealtime, o.OTPMMode)
	}
	for _, r := range o.Rates {
		if r <= 0 {
			return fmt.Errorf("Rates must be positive, got %d", r)
		}
	}
	if err := o.Replay.validate(); err != nil {
		return within("Replay.", err)
	}
	return nil
}

// within prefixes every error joined in err with the path of the field
// that holds them.
func within(path string, err error) error {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return fmt.Errorf("%s%w", path, err)
	}
	var errs []error
	for _, e := range joined.Unwrap() {
		errs = append(errs, fmt.Errorf("%s%w", path, e))
	}
	return errors.Join(errs...)
}

func (o Options) progress(format string, args ...any) {
	fmt.Fprintf(o.Progress, format+"\n", args...)
}

// Scenario is one benchmark.
type Scenario struct {
	// Name is what `sluice bench NAME` takes.
	Name string
	// Summary says what it measures, in one line.
	Summary string
	// Long marks a scenario that runs for many minutes: `sluice bench all`
	// leaves it out, it runs by name.
	Long bool
	run  func(ctx context.Context, o Options) (*Result, error)
}

// Run runs the scenario with o (defaults applied, then validated).
func (s Scenario) Run(ctx context.Context, o Options) (*Result, error) {
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, &OptionsError{Err: err}
	}
	start := o.Clock.Now()
	r, err := s.run(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("running %s: %w", s.Name, err)
	}
	r.Name = s.Name
	r.Elapsed = o.Clock.Now().Sub(start)
	return r, nil
}

// OptionsError is returned by Scenario.Run for options it refuses, before
// anything runs.
type OptionsError struct{ Err error }

func (e *OptionsError) Error() string { return "bench options: " + e.Err.Error() }

func (e *OptionsError) Unwrap() error { return e.Err }

// ErrUnknownScenario is returned by Lookup for a name it does not know.
var ErrUnknownScenario = errors.New("unknown scenario")

// Scenarios returns every scenario in the order `all` runs them (`all`
// skips the Long ones).
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "goodput", Summary: "drain time vs the ideal for the binding quota, provider 429s, client failures", run: runGoodput},
		{Name: "priority", Summary: "Poisson overload at 2x: critical p95 vs unloaded, per-class share of throughput", run: runPriority},
		{Name: "outage", Summary: "15 s of 529s at half load: client failures, probes while open, recovery time", run: runOutage},
		{Name: "overhead", Summary: "open-loop latency and CPU added by the gateway and by a bare reverse proxy over calling the mock directly", run: runOverhead},
		{Name: "mock", Summary: "mock provider requests per second on loopback", run: runMockThroughput},
		{Name: "batch-route", Summary: "N jobs with long deadlines routed to the provider's Batch API vs the synchronous path: mock time, provider calls, cost, duplicates",
			Long: true, run: runBatchRoute},
		{Name: "trace", Summary: "replayed production traces plus a batch on one key: per-class latency vs unloaded and vs a simulated ideal scheduler, provider 429s, the batch's drain",
			Long: true, run: runTrace},
	}
}

// Lookup returns the named scenario; "all" is not a scenario.
func Lookup(name string) (Scenario, error) {
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
	}
	names := []string{}
	for _, s := range Scenarios() {
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("%w %q (want one of %s, all)", ErrUnknownScenario, name, strings.Join(names, ", "))
}

// sample is the mock's state (and the gateway's breaker, when there is a
// gateway) at one instant of a run.
type sample struct {
	at       time.Duration
	byStatus map[string]int64
	breaker  string // "" without a gateway
}

// total is every answer counted so far.
func (s sample) total() int64 {
	var n int64
	for _, v := range s.byStatus {
		n += v
	}
	return n
}

// side is one run of a workload against its own fresh mock, through the
// gateway or with the naive client.
type side struct {
	name    string
	outs    []Outcome
	stats   mock.Stats
	metrics counters // gateway runs only
	naive   NaiveStats
	samples []sample
}

// sideConfig says how to run one side.
type sideConfig struct {
	name string
	mock mock.Config
	// gateway, when set, puts the gateway in front of the mock; otherwise
	// the naive client calls the mock directly.
	gateway *gatewaySetup
	// deadline is sent as X-Sluice-Deadline through the gateway.
	deadline time.Duration
	naive    NaiveConfig
	// naiveGroups, when set, gives each Item.Group its own naive client
	// (each group an application of its own); naive is then unused.
	naiveGroups []NaiveConfig
	// run drives the load with send.
	run func(ctx context.Context, send sender) []Outcome
	// sampleEvery, when positive, records the mock's statuses (and the
	// breaker state) at this interval.
	sampleEvery time.Duration
}

// runSide starts a fresh mock (and gateway), runs the load and collects
// both sides' figures.
func runSide(ctx context.Context, o Options, sc sideConfig) (s side, err error) {
	s.name = sc.name
	var stop stopper
	keep := o.Keep != nil && sc.gateway != nil
	defer func() {
		if keep && err == nil {
			o.Keep.hold(stop)
			return
		}
		err = errors.Join(err, stop.stop(ctx))
	}()
	sc.mock.Clock = o.Clock
	m, err := startMock(ctx, sc.mock)
	if err != nil {
		return s, err
	}
	stop.add(m.Stop)
	client := &http.Client{Transport: newTransport()}
	stop.add(func(context.Context) error { client.CloseIdleConnections(); return nil })
	var send sender
	var gwURL string
	if sc.gateway != nil {
		gw, err := startGateway(ctx, m.URL(), *sc.gateway)
		if err != nil {
			return s, err
		}
		stop.add(gw.Stop)
		gwURL = "http://" + gw.Addr()
		if keep && o.Keep.Started != nil {
			o.Keep.Started(gwURL, m.URL())
		}
		send = gatewaySender(client, gwURL, sc.deadline)
	} else {
		cfgs := sc.naiveGroups
		if len(cfgs) == 0 {
			cfgs = []NaiveConfig{sc.naive}
		}
		var clients []*Naive
		var senders []sender
		for i, nc := range cfgs {
			nc.HTTPClient, nc.Clock, nc.Seed = client, o.Clock, o.Seed+uint64(i)
			n, err := NewNaive(nc)
			if err != nil {
				return s, err
			}
			clients = append(clients, n)
			senders = append(senders, naiveSender(n, m.URL()))
		}
		defer func() {
			for _, n := range clients {
				st := n.Stats()
				s.naive.Requests += st.Requests
				s.naive.Attempts += st.Attempts
				s.naive.Retries += st.Retries
			}
		}()
		send = func(ctx context.Context, it Item) (int, int, error) {
			return senders[min(max(it.Group, 0), len(senders)-1)](ctx, it)
		}
	}
	if sc.sampleEvery > 0 {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { s.samples = sampleRun(ctx, o.Clock, m, client, gwURL, sc.sampleEvery, done) })
		s.outs = sc.run(ctx, send)
		close(done)
		wg.Wait()
	} else {
		s.outs = sc.run(ctx, send)
	}
	s.stats = m.Stats()
	if gwURL != "" {
		if s.metrics, err = scrapeMetrics(ctx, client, gwURL); err != nil {
			return s, err
		}
	}
	return s, ctx.Err()
}

// sampleRun records samples every interval until done is closed.
func sampleRun(ctx context.Context, clk clock.Clock, m *mock.Server, client *http.Client, gwURL string, every time.Duration, done <-chan struct{}) []sample {
	t0 := clk.Now()
	var out []sample
	t := clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-done:
			return out
		case <-ctx.Done():
			return out
		case <-t.C():
		}
		sm := sample{at: clk.Now().Sub(t0), byStatus: m.Stats().Overall.ByStatus}
		if gwURL != "" {
			sm.breaker = breakerState(ctx, client, gwURL)
		}
		out = append(out, sm)
		t.Reset(every)
	}
}

// breakerState reads the anthropic upstream's breaker from GET /v1/status
// ("" when it cannot be read).
func breakerState(ctx context.Context, client *http.Client, gwURL string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gwURL+"/v1/status", nil)
	if err != nil {
		return ""
	}
	req.Header.Set("x-api-key", clientKey)
	resp, err := client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st opsview.StatusResponse
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return ""
	}
	for _, u := range st.Upstreams {
		if u.Name == anthropicUpstream {
			return u.Breaker
		}
	}
	return ""
}

// runBoth runs two sides at once (they have separate mocks) or one after
// the other.
func runBoth(ctx context.Context, o Options, concurrent bool, a, b sideConfig) (side, side, error) {
	if !concurrent {
		sa, err := runSide(ctx, o, a)
		if err != nil {
			return sa, side{}, fmt.Errorf("%s run: %w", a.name, err)
		}
		sb, err := runSide(ctx, o, b)
		if err != nil {
			return sa, sb, fmt.Errorf("%s run: %w", b.name, err)
		}
		return sa, sb, nil
	}
	var sa, sb side
	var ea, eb error
	var wg sync.WaitGroup
	wg.Go(func() { sa, ea = runSide(ctx, o, a) })
	wg.Go(func() { sb, eb = runSide(ctx, o, b) })
	wg.Wait()
	if ea != nil {
		ea = fmt.Errorf("%s run: %w", a.name, ea)
	}
	if eb != nil {
		eb = fmt.Errorf("%s run: %w", b.name, eb)
	}
	return sa, sb, errors.Join(ea, eb)
}

// providerRejections counts the mock's 429s and its overload answers
// (Anthropic 529, OpenAI 503).
func providerRejections(st mock.ScopeStats) (r429, overload int64) {
	return st.ByStatus["429"], st.ByStatus["529"] + st.ByStatus["503"]
}

// failures counts outcomes that did not succeed.
func failures(outs []Outcome) int {
	n := 0
	for _, o := range outs {
		if !o.OK() {
			n++
		}
	}
	return n
}

// firstFailure describes one failed outcome, for notes.
func firstFailure(outs []Outcome) string {
	i := slices.IndexFunc(outs, func(o Outcome) bool { return !o.OK() })
	if i < 0 {
		return ""
	}
	o := outs[i]
	if o.Err != nil {
		return fmt.Sprintf("status %d: %v", o.Status, o.Err)
	}
	return fmt.Sprintf("status %d", o.Status)
}
