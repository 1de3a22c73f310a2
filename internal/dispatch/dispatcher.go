package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

// Dispatcher is one upstream's engine. A single goroutine decides what is
// sent next: it takes the scheduler's head and admits it when the breaker
// allows, a concurrency slot is free and every quota bucket has room for
// its estimated cost; otherwise it sleeps on the clock until the earliest
// instant that could change that (bucket refill, pause end, breaker
// half-open) or until woken by an arrival or a completion. While the head
// waits for refill, a more urgent class's request that fits its headroom,
// or a later one of its own class that fits the head's claim on the
// buckets, may go first (bypass.go): the head waits at most twice as long
// as alone, so a big request is never starved by a stream of small ones.
// Attempts run in the callers' goroutines (Do).
//
// Create one with New, then Start it; Stop fails every queued request with
// ErrStopped.
type Dispatcher struct {
	cfg  settings
	clk  clock.Clock
	obs  Observer
	keys []*poolKey // the key pool; one key for api_key alone
	// responses remembers which key created each Response, for a pool of
	// more than one key (response_keys.go).
	responses responseKeys
	// counting is each key's token-counting bucket (count_tokens.go).
	counting *countTokensPool
	brk      *flow.Breaker
	aimd     *flow.AIMD
	budget   *flow.RetryBudget
	cal      *calibrator // learns the estimates' bias from reported usage
	backoff  flow.Backoff
	base     string

	rmu sync.Mutex // guards cfg.Rand

	fmu      sync.Mutex // guards lastFail and the fields of why.go below
	lastFail failure    // the latest attempt that failed for the upstream's health
	// breakerLog is the breaker's recent history; lastRate and
	// lastOverload the last 429 and 529 (why.go).
	breakerLog             []BreakerEvent
	lastRate, lastOverload Throttle

	mu    sync.Mutex // guards everything below
	sched *flow.Scheduler
	// unreachableScan is the breaker opening (its half-open instant) whose
	// queue was last scanned for requests it leaves no time for.
	unreachableScan time.Time
	seen            [llm.NumPriorities]time.Time // last arrival per class, for headroom
	backlogFrom     [llm.NumPriorities]time.Time // when each class's queue last became non-empty (saturation.go)
	room            *flow.BurstRoom              // the room learned for urgent bursts
	// claimed is the head whose claim the pool's limiters hold against
	// the requests going past it (bypass.go); noBypass turns that off
	// (tests of the old behaviour).
	claimed  *flow.Item
	noBypass bool
	// looseRoom lets a request too big to leave the room kept for the
	// more urgent classes take it at a full bucket at once (tests of the
	// old behaviour: admitKeep).
	looseRoom bool
	sessions  *expiring[*poolKey]              // the key each session last went to (prompt_cache.go)
	gap       [llm.NumPriorities]time.Duration // moving average of each class's inter-arrival time
	arrivals  [llm.NumPriorities]int           // arrivals per class (gap known from 2)
	inflight  int
	// reserved sums the estimated cost of the requests in flight, for
	// operators (Snapshot.Reserved); urgentDebited the estimates ever
	// admitted for critical and high (ClusterLoad.UrgentDebited).
	reserved      flow.Amount
	urgentDebited flow.Amount
	state         runState
	// draining is set by Drain: Do refuses and fails at once; tickets
	// are not affected.
	draining bool
	drained  chan struct{}             // closed by Drain: a Do backing off stops waiting
	bodies   map[*trackedBody]struct{} // bodies answered to Do and still being read (Stop cuts them)
	wake     chan struct{}             // buffered(1): something changed
	stopping chan struct{}             // closed by Stop

	life lifecycle.Base // Start and Stop; runs the admission loop

	// park is the admission loop's resting state, for tests that drive a
	// fake clock event by event (export_test.go).
	park struct {
		sync.Mutex
		parked  bool
		until   time.Time // its timer's instant; zero: until woken
		handled uint64    // the kicks the loop had seen when it last looked
	}
	kicks atomic.Uint64 // wake-ups asked for
}

type runState int

const (
	created runState = iota
	running
	stopped
)

// New returns a Dispatcher for cfg (after WithDefaults) or an error naming
// the invalid field.
func New(c Config) (*Dispatcher, error) {
	cfg, err := c.resolve()
	if err != nil {
		return nil, err
	}
	now := cfg.Clock.Now()
	d := &Dispatcher{
		cfg:      cfg,
		clk:      cfg.Clock,
		obs:      cfg.Observer,
		base:     trimSlash(cfg.BaseURL),
		backoff:  flow.Backoff{Base: cfg.Retry.BaseDelay, Max: cfg.Retry.MaxDelay}.WithDefaults(),
		room:     flow.NewBurstRoom(cfg.BurstMemory),
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		drained:  make(chan struct{}),
	}
	if cfg.RoomCap > 0 {
		// Until the urgent classes are seen, the batch class leaves the
		// room their first burst may need: the cap (flow.BurstRoom.Prime).
		d.room.Prime(llm.Low, flow.PrimeSeconds, now)
	}
	d.sessions = newExpiring[*poolKey](cfg.PromptCache.Prefixes)
	d.responses.ttl = cfg.ResponseRetention
	if d.keys, err = newPool(cfg, now); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	if d.counting, err = newCountTokensPool(cfg, now); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	slots := 0
	for _, k := range d.keys {
		slots += k.maxConc
	}
	if d.sched, err = flow.NewScheduler(cfg.weights(), cfg.MaxWait); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	if d.aimd, err = flow.NewAIMD(min(cfg.MinConcurrency, slots), slots, 0); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	if d.budget, err = flow.NewRetryBudget(cfg.Retry.BudgetRatio, cfg.Retry.BudgetMin, 0); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	d.cal = newCalibrator(cfg.OutputReservation == upstream.OutputReservationLearned)
	breakerRand := rand.New(rand.NewPCG(cfg.Rand.Uint64(), cfg.Rand.Uint64()))
	if d.brk, err = flow.NewBreaker(cfg.breakerConfig(), breakerRand, d.breakerChanged, now); err != nil {
		return nil, fmt.Errorf("upstream %q: %w", cfg.Name, err)
	}
	return d, nil
}

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

func (d *Dispatcher) breakerChanged(from, to flow.BreakerState) {
	d.noteBreaker(from, to, "automatic")
	d.obs.BreakerStateChanged(from, to)
	d.cfg.States.BreakerChanged(from, to)
	d.kick()
}

// Name returns the upstream's name.
func (d *Dispatcher) Name() string { return d.cfg.Name }

// Protocol returns the upstream's protocol.
func (d *Dispatcher) Protocol() llm.Protocol { return d.cfg.Protocol }

// Clock returns the dispatcher's time source.
func (d *Dispatcher) Clock() clock.Clock { return d.clk }

// Start starts the admission loop (lifecycle.Base: a second Start
// answers lifecycle.ErrStarted, a Start after Stop lifecycle.ErrStopped).
func (d *Dispatcher) Start(ctx context.Context) error {
	err := d.life.Start(ctx, func(run context.Context) error {
		d.mu.Lock()
		d.state = running
		d.mu.Unlock()
		d.life.Go(func() { d.loop(run) })
		return nil
	})
	if err != nil {
		return fmt.Errorf("starting dispatcher %q: %w", d.cfg.Name, err)
	}
	return nil
}

// Stop stops admitting, fails every queued request with ErrStopped and
// waits for the admission loop to exit (or ctx). Streams answered to Do
// and still being read are cut: their Body's Read returns ErrStopped, and
// a front door ends them with the protocol's error event
// (frontdoor.PrepareResponse); give them their grace before calling Stop.
// Other requests already sent (tickets' calls, JSON bodies) finish on
// their own. Stop is idempotent and safe before Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	if err := d.life.Stop(ctx, d.stop); err != nil {
		return fmt.Errorf("stopping dispatcher %q: %w", d.cfg.Name, err)
	}
	return nil
}

// stop is Stop's own step, before the loop is canceled and waited for:
// nothing is admitted or queued from here on, the queue is failed and the
// bodies still being read are cut.
func (d *Dispatcher) stop(context.Context) error {
	d.mu.Lock()
	d.state = stopped
	close(d.stopping)
	for _, it := range d.sched.Drain() {
		w := it.Value.(*waiter)
		w.admission <- admission{err: ErrStopped}
	}
	open := make([]*trackedBody, 0, len(d.bodies))
	for b := range d.bodies {
		open = append(open, b)
	}
	d.mu.Unlock()
	for _, b := range open {
		b.cut(ErrStopped)
	}
	return nil
}

// trackBody and untrackBody keep the set of bodies Stop cuts.
func (d *Dispatcher) trackBody(b *trackedBody) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bodies == nil {
		d.bodies = map[*trackedBody]struct{}{}
	}
	d.bodies[b] = struct{}{}
}

func (d *Dispatcher) untrackBody(b *trackedBody) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.bodies, b)
}

// Drain begins a shutdown of the live traffic: every request queued by Do
// (waiting for admission, or between attempts) fails at once with
// ErrStopped, as do later Do calls, so their callers can be answered now
// rather than when the shutdown's grace ends. Requests already sent go on
// (their streams get the grace); tickets (Acquire, TryAcquire) are not
// affected, so durable callers keep their own shutdown. Drain returns how
// many queued requests it failed; it is idempotent, and Stop still ends
// the dispatcher.
func (d *Dispatcher) Drain() int {
	d.mu.Lock()
	if !d.draining {
		d.draining = true
		close(d.drained)
	}
	dropped := d.sched.RemoveIf(func(it *flow.Item) bool { return !it.Value.(*waiter).ticket })
	for _, it := range dropped {
		it.Value.(*waiter).admission <- admission{err: ErrStopped}
	}
	d.mu.Unlock()
	d.kick()
	return len(dropped)
}

// Do sends req upstream through the queue and returns the upstream's
// response: a success, or a terminal provider error passed through as it
// is (quota, client error). When Sluice itself gives up it returns an
// *Error whose Reason is one of the sentinel errors (ErrShed, ErrDeadline,
// ErrTooLarge, ErrRetriesExhausted, ErrRetryBudget, ErrStopped). A
// cancelled ctx removes the request from the queue and returns ctx's
// cause. The caller must close the Response's Body.
func (d *Dispatcher) Do(ctx context.Context, req *Request) (*Response, error) {
	if req == nil {
		return nil, errors.New("dispatching: nil request")
	}
	w := d.newWaiter(ctx, req)
	resp, err := d.do(ctx, w)
	switch {
	case err != nil:
		d.gateDone(w, GateEnd{Sent: w.attempts > 0})
	case resp.body == nil: // the provider's error answer, passed through
		d.gateDone(w, GateEnd{Sent: true})
	}
	// A success ends its Gate charge when its body ends (trackedBody).
	return resp, err
}
