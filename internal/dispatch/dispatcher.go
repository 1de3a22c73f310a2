package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
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
// half-open) or until woken by an arrival or a completion. The head is not
// skipped for a smaller request that would fit: it keeps its turn, so a big
// request is never starved by a stream of small ones. Attempts run in the
// callers' goroutines (Do).
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
	seen            [llm.NumPriorities]time.Time     // last arrival per class, for headroom
	backlogFrom     [llm.NumPriorities]time.Time     // when each class's queue last became non-empty (saturation.go)
	room            *flow.BurstRoom                  // the room learned for urgent bursts
	sessions        *expiring[*poolKey]              // the key each session last went to (prompt_cache.go)
	gap             [llm.NumPriorities]time.Duration // moving average of each class's inter-arrival time
	arrivals        [llm.NumPriorities]int           // arrivals per class (gap known from 2)
	inflight        int
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

// kick wakes the admission loop without blocking.
func (d *Dispatcher) kick() {
	d.kicks.Add(1)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// loop is the admission goroutine.
func (d *Dispatcher) loop(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		handled := d.kicks.Load()
		sleep := d.admit()
		var fire <-chan time.Time
		if sleep > 0 {
			if timer == nil {
				timer = d.clk.NewTimer(sleep)
			} else {
				timer.Reset(sleep)
			}
			fire = timer.C()
		}
		d.setParked(true, sleep, handled)
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-fire:
		}
		d.setParked(false, 0, handled)
		if timer != nil {
			timer.Stop()
		}
	}
}

// setParked records whether the loop is waiting, for how long, and the
// wake-ups it had seen before its last look at the queue.
func (d *Dispatcher) setParked(parked bool, sleep time.Duration, handled uint64) {
	d.park.Lock()
	defer d.park.Unlock()
	d.park.parked, d.park.until, d.park.handled = parked, time.Time{}, handled
	if parked && sleep > 0 {
		d.park.until = d.clk.Now().Add(sleep)
	}
}

// admit sends every request it can and returns how long to sleep before
// trying again (0: until woken).
func (d *Dispatcher) admit() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.state == running {
		now := d.clk.Now()
		it := d.sched.Peek(now)
		if it == nil {
			return untilRelease(d.sched.NextRelease(now), now) // nothing, or only held clients
		}
		w := it.Value.(*waiter)
		if ok, readyAt := d.brk.Ready(now); !ok {
			if readyAt.IsZero() {
				return 0 // half-open with every probe out: wait for a result
			}
			if d.failUnreachable(readyAt) > 0 {
				continue // the head may have gone
			}
			return max(readyAt.Sub(now), time.Nanosecond)
		}
		if out, probeAt := d.keysOut(); out && probeAt.After(now) && d.failKeysOut(probeAt) > 0 {
			continue // every key rejected: the live requests are answered now
		}
		if d.inflight >= d.aimd.Limit() {
			return 0 // a completion wakes us
		}
		if gw, err := d.gate(w, now); err != nil {
			d.sched.Remove(it)
			w.admission <- admission{err: err}
			continue
		} else if gw.Waits() {
			// Its client's own limit: the client's requests are passed
			// over until then (or until one of them ends).
			var until time.Time
			if gw.For > 0 {
				until = now.Add(gw.For)
			}
			d.sched.Hold(it, until)
			continue
		}
		key, wait, err := d.pick(w, d.headroom(w.req.Priority, now), now)
		if err != nil {
			// Limits learned from headers after it was queued make it too large.
			d.sched.Remove(it)
			w.admission <- admission{err: err}
			continue
		}
		if key == nil {
			urgent, ukey := d.urgentFit(it, now)
			if urgent == nil {
				if r := untilRelease(d.sched.NextRelease(now), now); r > 0 && r < wait {
					return r // a held client, maybe of a more urgent class, may go first
				}
				return wait
			}
			it, w, key = urgent, urgent.Value.(*waiter), ukey
		}
		state, _ := d.brk.State(now)
		gen, err := d.brk.Allow(now)
		if err != nil {
			d.unpick(key, w.cost, now)
			continue // the state moved under us; Ready will say what to wait for
		}
		d.sched.Take(it)
		d.inflight++
		key.inflight++
		key.noteReserved(w, now)
		d.noteAdmitted(w)
		w.admission <- admission{gen: gen, at: now, probe: state == flow.HalfOpen, key: key, keyProbe: key.out, reserved: w.cost}
	}
	return 0
}

// untilRelease is how long from now until next (0 when next is zero).
func untilRelease(next, now time.Time) time.Duration {
	if next.IsZero() {
		return 0
	}
	return max(next.Sub(now), time.Nanosecond)
}

// failUnreachable answers at once, with ErrUnavailable, every queued
// request whose deadline ends before the open breaker's next probe at
// readyAt: waiting could only end in the same answer later. It scans once
// per readyAt and returns how many it removed. d.mu must be held.
func (d *Dispatcher) failUnreachable(readyAt time.Time) int {
	return d.failQueued(readyAt, func(w *waiter) bool { return w.deadline.Before(readyAt) })
}

// failKeysOut is failUnreachable while the provider rejects every key of
// the pool, until the next key probe at probeAt: every live request is
// answered now (a rejected key seldom comes back by itself; an operator
// replaces it), a ticket (a job) waits for the probe unless its deadline
// ends first. A live request arriving when a probe is due is the probe.
func (d *Dispatcher) failKeysOut(probeAt time.Time) int {
	return d.failQueued(probeAt, func(w *waiter) bool { return !w.ticket || w.deadline.Before(probeAt) })
}

// failQueued removes the queued requests gone says cannot wait for at and
// answers them with ErrUnavailable, once per at. d.mu must be held.
func (d *Dispatcher) failQueued(at time.Time, gone func(*waiter) bool) int {
	if at.Equal(d.unreachableScan) {
		return 0
	}
	d.unreachableScan = at
	removed := d.sched.RemoveIf(func(it *flow.Item) bool { return gone(it.Value.(*waiter)) })
	for _, it := range removed {
		it.Value.(*waiter).admission <- admission{err: ErrUnavailable}
	}
	return len(removed)
}

// waiter is one request's journey through the dispatcher.
type waiter struct {
	req  *Request
	item flow.Item
	// cost is what the current (or next) attempt reserves: full, less
	// the prefix its key holds in its cache (costOn, set by pick).
	cost flow.Amount
	// full is the request's whole estimate; cache what its body says
	// about the provider's prompt cache; sentAt when its latest attempt
	// was sent (the cache's TTL runs from there).
	full      flow.Amount
	cache     promptCache
	sentAt    time.Time
	deadline  time.Time
	admission chan admission // buffered(1); sent under d.mu

	admittedOnce bool
	queueWait    time.Duration // waited before the latest attempt, in all
	// waitFrom is when the request last started waiting (arrival, the end
	// of an attempt); zero while an attempt is in flight.
	waitFrom     time.Time
	attempts     int // upstream attempts made
	burnt        int // attempts that count against MaxAttempts
	hintlessRate int // RATE answers without a retry hint
	last         *llm.Outcome
	ticket       bool // a durable caller's ticket (Acquire), not a Do
	// pin, when not nil, is the only key the request may be sent with:
	// the key that created the response it continues
	// (previous_response_id).
	pin *poolKey
	// ctx is Do's context, the parent of the request's spans (nil for a
	// ticket: its attempt's context is).
	ctx context.Context
	// gated is set once the request's Gate admitted it (d.mu held), held
	// is what the Gate last held it back with; gateOnce ends the Gate's
	// charge once (gateDone).
	gated    bool
	held     GateWait
	gateOnce sync.Once
}

// headroom is what a request of class c must leave unused in each
// bucket: the room learned for the more urgent classes' bursts (capped at
// burst_room of the depth, HighRoomShare of that for high), and its configured headroom while a more
// urgent class has sent a request within HeadroomWindow; traffic of one
// class alone uses the whole bucket. d.mu must be held.
func (d *Dispatcher) headroom(c llm.Priority, now time.Time) flow.Keep {
	if u, ok := d.saturating(c, now); ok {
		return d.headroom(u, now) // its room is no use against u (saturation.go)
	}
	k := flow.Keep{Seconds: d.room.Seconds(c, now), Cap: d.cfg.RoomCap}
	if c == llm.High {
		// An interactive class: it leaves critical a smaller room.
		k.Cap *= HighRoomShare
	}
	for u := llm.Critical; u < c; u++ {
		if !d.seen[u].IsZero() && now.Sub(d.seen[u]) < d.activeWindow(u) {
			k.Share = d.cfg.Headroom[c]
			break
		}
	}
	return k
}

// activeWindow is how long after its last request class u still counts
// as active for the lower classes' headroom: headroom_window, cut to
// HeadroomGaps of its usual inter-arrival time (never below
// HeadroomMinWindow) once it has one. A class that arrived steadily and
// stopped is over well before a minute: the headroom it kept would be
// refill lost at the end of the drain. d.mu held.
func (d *Dispatcher) activeWindow(u llm.Priority) time.Duration {
	win := d.cfg.HeadroomWindow
	if g := d.gap[u]; g > 0 || d.gapKnown(u) {
		win = min(win, max(HeadroomGaps*g, HeadroomMinWindow))
	}
	return win
}

// gapKnown reports whether class u has arrived at least twice. d.mu held.
func (d *Dispatcher) gapKnown(u llm.Priority) bool { return d.arrivals[u] >= 2 }

// arrived records an arrival of class c costing cost at now: for the
// headroom's activity window and the room learned for bursts (in seconds
// of the pool's refill). d.mu held.
func (d *Dispatcher) arrived(c llm.Priority, cost flow.Amount, now time.Time) {
	d.queued(c, now)
	if c < llm.NumPriorities-1 && d.cfg.RoomCap > 0 {
		d.room.Arrive(c, cost, d.poolRate(now), now)
	}
	if prev := d.seen[c]; !prev.IsZero() {
		g := max(now.Sub(prev), 0)
		if d.arrivals[c] < 2 {
			d.gap[c] = g
		} else {
			d.gap[c] += (g - d.gap[c]) / 8
		}
	}
	d.arrivals[c]++
	d.seen[c] = now
}

// urgentFit is called when head must wait for its buckets to refill. A
// more urgent class's next request that fits now, within its own (smaller)
// headroom, goes first and its cost is reserved: this is what the headroom
// is for. The head keeps its turn otherwise, and an overdue head (past its
// class's max wait) is never overtaken. d.mu must be held.
func (d *Dispatcher) urgentFit(head *flow.Item, now time.Time) (*flow.Item, *poolKey) {
	if d.sched.Overdue(head, now) {
		return nil, nil
	}
	for c := llm.Critical; c < head.Class; c++ {
		it := d.sched.PeekClass(c, now)
		if it == nil {
			continue
		}
		w := it.Value.(*waiter)
		if gw, err := d.gate(w, now); err != nil || gw.Waits() {
			continue // the next admission step holds it back, or fails it
		}
		if k, _, err := d.pick(w, d.headroom(c, now), now); err == nil && k != nil {
			return it, k
		}
	}
	return nil, nil
}

// admission is the admission step's answer to a waiter: the attempt it
// may make now (under breaker generation gen, on key, with reserved
// counted), or err when the dispatcher gives up on it. (A cluster's
// "grant" is what a node is given at a sync; see internal/cluster.)
type admission struct {
	gen uint64
	at  time.Time
	err error
	// probe marks an attempt the half-open breaker let through to test
	// the upstream's health.
	probe bool
	// key is the pool's key the attempt is sent with; its cost is
	// reserved in that key's buckets (and its org's). keyProbe is set
	// when the key was out of the pool: the attempt is its probe.
	key      *poolKey
	keyProbe bool
	// reserved is the estimate counted in Dispatcher.reserved while the
	// attempt is in flight.
	reserved flow.Amount
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

// newWaiter is req's journey through the dispatcher, starting now.
func (d *Dispatcher) newWaiter(ctx context.Context, req *Request) *waiter {
	now := d.clk.Now()
	est := d.cal.adjust(req.Cost)
	w := &waiter{
		req:       req,
		cost:      flow.NewAmount(est.InputTokens, est.OutputTokens),
		admission: make(chan admission, 1),
		ctx:       ctx,
		pin:       d.responseKey(ctx, req.Cost.PreviousResponseID, now),
	}
	w.full = w.cost
	w.cache = d.cacheOf(req)
	class := req.Priority
	if !class.Valid() {
		class = llm.Normal
	}
	w.deadline = req.Deadline
	if w.deadline.IsZero() {
		w.deadline = now.Add(d.cfg.MaxWait[class])
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(w.deadline) {
		w.deadline = dl
	}
	w.waitFrom = now
	w.item = flow.Item{
		Class:   class,
		Client:  req.Client,
		Size:    float64(est.InputTokens + est.OutputTokens),
		Cost:    w.cost,
		Arrival: now,
		Value:   w,
	}
	return w
}

// do is Do for w: queue, admission, attempts and retries.
func (d *Dispatcher) do(ctx context.Context, w *waiter) (*Response, error) {
	req, class, now := w.req, w.item.Class, w.waitFrom
	if err := d.tooLarge(w.cost, now); err != nil {
		return nil, d.giveUp(w, ErrTooLarge, err.Error())
	}

	d.mu.Lock()
	if d.state != running || d.draining {
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrStopped, "the gateway is shutting down")
	}
	if ok, readyAt := d.brk.Ready(now); !ok && (readyAt.After(w.deadline) || req.FailFast || d.brk.Held()) {
		// An outage it cannot outlast (or one an operator holds open): say
		// so now, not at its deadline.
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrUnavailable, "")
	}
	if out, probeAt := d.keysOut(); out && (probeAt.IsZero() || probeAt.After(now)) {
		// Every key rejected and no probe due: the same (failKeysOut).
		d.mu.Unlock()
		return nil, d.giveUp(w, ErrUnavailable, "")
	}
	predicted := d.predictWait(d.sched.DemandAhead(class, req.Client).Add(w.cost), now)
	if now.Add(predicted).After(w.deadline) {
		d.mu.Unlock()
		e := d.giveUp(w, ErrShed, fmt.Sprintf("predicted queue wait %v exceeds the deadline", predicted.Round(time.Millisecond)))
		e.RetryAfter = clientRetryAfter(predicted)
		return nil, e
	}
	if g := req.Gate; g != nil {
		// The client's own limit, with its requests already queued here.
		queued := d.sched.ClientDemand(req.Client).Add(w.cost)
		if wait, limit := g.Predict(queued[flow.Requests], queued[flow.Tokens], now); now.Add(wait).After(w.deadline) {
			d.mu.Unlock()
			e := d.giveUp(w, ErrClientLimit, fmt.Sprintf("%s leaves room for this request in %v, after its deadline", limit, wait.Round(time.Millisecond)))
			e.RetryAfter = clientRetryAfter(wait)
			return nil, e
		}
	}
	d.sched.Push(&w.item)
	d.arrived(class, w.cost, now)
	d.mu.Unlock()
	d.obs.Enqueued(class)
	// The fast path: run the admission step in the caller's goroutine
	// instead of waiting for the admission goroutine's turn. admit admits
	// in the scheduler's order under d.mu, as the loop does, so priority,
	// fairness and the quota hold whoever runs it; the loop is woken only
	// when a timed retry is due (a refill, a breaker), which only it keeps.
	if d.admit() > 0 {
		d.kick()
	}

	for {
		g, err := d.await(ctx, w)
		if err != nil {
			return nil, err
		}
		resp, retry, err := d.attempt(ctx, w, g)
		if !retry {
			return resp, err
		}
	}
}

// await waits in the queue for w's admission, its deadline, ctx or Stop.
func (d *Dispatcher) await(ctx context.Context, w *waiter) (admission, error) {
	select {
	case g := <-w.admission: // admitted at once: no timer
		if g.err != nil {
			return g, d.grantError(w, g.err)
		}
		return g, nil
	default:
	}
	t := d.clk.NewTimer(w.deadline.Sub(d.clk.Now()))
	defer t.Stop()
	var reason error
	select {
	case g := <-w.admission:
		if g.err != nil {
			return g, d.grantError(w, g.err)
		}
		return g, nil
	case <-ctx.Done():
		reason = context.Cause(ctx)
	case <-t.C():
		reason = ErrDeadline
		d.mu.Lock()
		out, _ := d.keysOut()
		d.mu.Unlock()
		if st, _ := d.brk.State(d.clk.Now()); st != flow.Closed || out {
			reason = ErrUnavailable // it was the outage that held it
		}
	}
	d.mu.Lock()
	var held GateWait
	if d.sched.Held(&w.item, d.clk.Now()) {
		held = w.held // its client's own limit is what holds it
	}
	d.mu.Unlock()
	d.mu.Lock()
	removed := d.sched.Remove(&w.item)
	d.mu.Unlock()
	if !removed {
		// Admitted (or stopped) in the meantime: the admission is in the channel.
		g := <-w.admission
		if g.err == nil {
			d.release(w, g, flow.Neutral, w.cost)
		}
	}
	d.kick()
	switch {
	case errors.Is(reason, ErrUnavailable):
		return admission{}, d.giveUp(w, ErrUnavailable, "")
	case errors.Is(reason, ErrDeadline) && held.Waits():
		e := d.giveUp(w, ErrClientLimit, held.Limit+" held the request until its deadline")
		e.RetryAfter = clientRetryAfter(held.For)
		return admission{}, e
	case errors.Is(reason, ErrDeadline):
		return admission{}, d.giveUp(w, ErrDeadline, "the request waited in the queue until its deadline")
	}
	return admission{}, fmt.Errorf("waiting for upstream %q: %w", d.cfg.Name, reason)
}

func (d *Dispatcher) grantError(w *waiter, err error) error {
	switch {
	case errors.Is(err, ErrStopped):
		d.mu.Lock()
		draining := d.draining
		d.mu.Unlock()
		if draining {
			return d.giveUp(w, ErrStopped, "the gateway is shutting down")
		}
		return d.giveUp(w, ErrStopped, "the upstream's dispatcher stopped")
	case errors.Is(err, flow.ErrTooLarge):
		return d.giveUp(w, ErrTooLarge, err.Error())
	case errors.Is(err, ErrUnavailable):
		return d.giveUp(w, ErrUnavailable, "")
	}
	return err
}

// release frees an admitted request's slot and refunds what it did not
// use.
func (d *Dispatcher) release(w *waiter, g admission, r flow.Result, refund flow.Amount) {
	if g.key != nil {
		g.key.answered(w)
	}
	now := d.clk.Now()
	if g.key != nil {
		g.key.refund(refund, now)
	}
	d.freeSlot(w, g, r, now)
}

// releaseAnswered is release for a request the provider answered with its
// usage: the reservation is reconciled with actual, so that Observe can
// credit the output the provider gave back.
func (d *Dispatcher) releaseAnswered(w *waiter, g admission, r flow.Result, actual flow.Amount) {
	if g.key != nil {
		g.key.answered(w)
	}
	now := d.clk.Now()
	if g.key != nil {
		g.key.reconcile(w.cost, actual, now)
	}
	d.freeSlot(w, g, r, now)
}

// freeSlot is the end of release: the breaker's verdict, the slot.
func (d *Dispatcher) freeSlot(w *waiter, g admission, r flow.Result, now time.Time) {
	w.waitFrom = now // whatever follows (backoff, the queue) is waiting
	d.brk.Done(g.gen, r, now)
	d.mu.Lock()
	d.inflight--
	d.reserved = d.reserved.Sub(g.reserved)
	if g.key != nil {
		g.key.inflight--
		g.key.probing = false
	}
	d.mu.Unlock()
	d.kick()
}

// giveUp builds the *Error for reason and tells the observer. An outage
// (ErrUnavailable, or attempts that ended in overload, server errors or
// timeouts) is answered in the provider's overloaded shape with a message
// naming its cause; msg "" lets the outage describe itself.
func (d *Dispatcher) giveUp(w *waiter, reason error, msg string) *Error {
	now := d.clk.Now()
	e := &Error{
		Reason:    reason,
		Message:   msg,
		Attempts:  w.attempts,
		QueueWait: w.queueWait,
		Last:      w.last,
	}
	if !w.waitFrom.IsZero() {
		e.QueueWait += since(w.waitFrom, now)
		d.traceQueueWait(w, now, reason)
	}
	exhausted := errors.Is(reason, ErrRetriesExhausted) || errors.Is(reason, ErrRetryBudget)
	switch {
	case errors.Is(reason, ErrTooLarge):
		e.Status = http.StatusRequestEntityTooLarge
	case errors.Is(reason, ErrStopped):
		e.Status = http.StatusServiceUnavailable
	case errors.Is(reason, ErrUnavailable), exhausted && outageKind(w.last):
		d.describeOutage(e, now, w.burnt)
	case exhausted:
		e.Status = statusForGiveUp(w.last)
		e.RetryAfter = clientRetryAfter(d.backoff.Ceiling(w.burnt))
	case errors.Is(reason, ErrClientLimit):
		e.Status = http.StatusTooManyRequests // the caller sets RetryAfter from its gate
	default: // shed, deadline: a quota wait
		e.Status = http.StatusTooManyRequests
		e.RetryAfter = clientRetryAfter(time.Second)
	}
	e.Type = errorTypeFor(d.cfg.Protocol, e.Status)
	d.obs.Shed(w.item.Class, reason)
	return e
}

// clientRetryAfter is the retry-after suggested to a client: at least 1s,
// at most MaxClientRetryAfter.
func clientRetryAfter(d time.Duration) time.Duration {
	return min(max(d, time.Second), MaxClientRetryAfter).Round(time.Second)
}

// sleep waits d on the clock, or until ctx ends or the dispatcher stops.
func (d *Dispatcher) sleep(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		return nil
	}
	t := d.clk.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-d.stopping:
		return ErrStopped
	case <-d.drained:
		return ErrStopped
	}
}

// putBack puts w back in its original place in line (a retry; a job is
// requeued in the store instead).
func (d *Dispatcher) putBack(w *waiter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != running || (d.draining && !w.ticket) {
		return ErrStopped
	}
	d.sched.PutBack(&w.item)
	d.queued(w.item.Class, d.clk.Now())
	d.kick()
	return nil
}

func (d *Dispatcher) uniform() float64 {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	return d.cfg.Rand.Float64()
}
