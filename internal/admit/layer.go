package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/upstream"
)

// Engine is what the layer needs of an upstream's engine;
// *dispatch.Dispatcher implements it.
type Engine interface {
	Do(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error)
	// Unavailable reports whether the upstream refuses every request now
	// (its breaker open, or held open by an operator).
	Unavailable() bool
}

// Config configures a Layer.
type Config struct {
	// Clients are the configured clients' limits and budgets. Defaults
	// to none (nothing limited, spend still counted).
	Clients []Client
	// Prices is the price table budgets are charged at. Defaults to the
	// shipped table.
	Prices Prices
	// Upstreams are the upstreams' configs, for their protocols, their
	// classes' default deadlines and their fallbacks. Required for every
	// engine given to Bind.
	Upstreams []upstream.Config
	// SharedSpend is set when other gateways write their spend to the
	// same store: after each flush the windows are rebased on the store's
	// sums. Defaults to false.
	SharedSpend bool
	// HoldTimeout is how long a request of a client with a budget waits
	// for its reservation to be written to the store before it is sent
	// without one (docs/budgets.md, "What survives a crash"). Defaults to
	// HoldTimeoutDefault.
	HoldTimeout time.Duration
	// Clock is the time source. Defaults to the wall clock.
	Clock clock.Clock
	// Logger receives the layer's warnings (budgets exhausted, unpriced
	// models, spend flush failures). Defaults to a discarding logger.
	Logger *slog.Logger
	// Observer receives spend, refusals and fallbacks. Defaults to
	// NopObserver.
	Observer Observer
}

// Layer is the admission layer (see the package doc). Make one with New;
// Start loads the spend kept in the store and flushes to it, Stop writes
// what is pending. It is safe for concurrent use.
type Layer struct {
	clock  clock.Clock
	obs    Observer
	spend  *spender
	gates  *gates
	router *router

	clients atomic.Pointer[map[string]Client]

	life    lifecycle.Base
	mu      sync.Mutex // guards tenants and member
	tenants *cluster.Tenants
	member  *membership // the cluster this gateway is a node of (cluster.go); nil when none

	log       *slog.Logger
	upstreams []upstream.Config // in config order: the cluster node's members
}

// New returns a Layer for cfg, or an error naming the invalid field.
func New(cfg Config) (*Layer, error) {
	clk := clock.Or(cfg.Clock)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	obs := cfg.Observer
	if obs == nil {
		obs = NopObserver{}
	}
	if cfg.HoldTimeout < 0 {
		return nil, fmt.Errorf("HoldTimeout: %s is negative (0 takes the default, %s)", cfg.HoldTimeout, HoldTimeoutDefault)
	}
	sp, err := newSpender(cfg.Prices, cfg.SharedSpend, cfg.HoldTimeout, clk, log, obs)
	if err != nil {
		return nil, err
	}
	l := &Layer{clock: clk, obs: obs, spend: sp, gates: newGates(clk), router: newRouter(cfg.Upstreams, clk, obs),
		log: log, upstreams: cfg.Upstreams}
	l.SetClients(cfg.Clients)
	return l, nil
}

// SetClients applies the clients' limits and budgets (a reload calls it):
// each client keeps its spend and reservations; a pair whose limits
// changed gets a new gate, the requests holding the old one finish with
// it.
func (l *Layer) SetClients(clients []Client) {
	m := make(map[string]Client, len(clients))
	for _, c := range clients {
		m[c.Name] = c
	}
	l.clients.Store(&m)
	l.spend.setBudgets(clients)
}

// Bind gives the layer the engines it sends to, by upstream name (the
// router's targets). It is called once the engines are built, before the
// first request.
func (l *Layer) Bind(engines map[string]Engine) { l.router.bind(engines) }

// AwaitSpendStore says the spend is kept in a store that Start will be
// given once it connects (in the background): until then the layer
// cannot tell what a client spent, so a request of a client with a
// budget is refused (ErrSpendNotLoaded: 503 with retry-after
// SpendNotLoadedRetryAfter) while the others are served and their spend
// counted in memory, written once the store connects.
func (l *Layer) AwaitSpendStore() { l.spend.awaiting.Store(true) }

// Start loads the spend kept in st (nil: spend kept in memory only) and
// flushes to it every SpendFlushEvery until Stop (lifecycle.Base). A
// Start that fails reading st starts nothing and may be tried again (the
// store connecting in the background may fail between its opening and
// this read).
func (l *Layer) Start(ctx context.Context, st SpendStore) error {
	if err := l.spend.start(ctx, st); err != nil {
		return err
	}
	if err := l.life.Start(ctx, func(context.Context) error { return nil }); err != nil {
		// Stopped before this start (a store that connected in the
		// background after the gateway's Stop): the spender started
		// above must not outlive the layer.
		if errors.Is(err, lifecycle.ErrStopped) {
			return errors.Join(err, l.spend.close(ctx))
		}
		return err
	}
	return nil
}

// Stop writes the pending spend to the store. It is idempotent and safe
// before Start.
func (l *Layer) Stop(ctx context.Context) error {
	return l.life.Stop(ctx, l.spend.close)
}

// shareWith makes the clients' limits and, when the spend is shared
// through the store, their budgets tenants of the cluster t (started by
// the caller; stopSharing stops it); timeout bounds a first join's sync.
func (l *Layer) shareWith(t *cluster.Tenants, timeout time.Duration) {
	l.mu.Lock()
	l.tenants = t
	l.mu.Unlock()
	l.gates.shares.Store(newClientShares(t, l.clock, timeout))
	if l.spend.shared {
		l.spend.ledger.SetVisibleAfter(spendVisibleAfter)
		l.spend.joinTimeout = timeout
		l.spend.tenants.Store(t)
	}
}

// stopSharing gives the cluster tenants' leases back (before the
// cluster's store closes). It is idempotent.
func (l *Layer) stopSharing(ctx context.Context) error {
	l.mu.Lock()
	t := l.tenants
	l.tenants = nil
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	return t.Stop(ctx)
}

// client returns the named client's config (the zero Client, which
// limits nothing, for a caller not configured).
func (l *Layer) client(name string) Client {
	return (*l.clients.Load())[name]
}

// gate returns client's gate on upstream (nil: no limit there).
func (l *Layer) gate(client, upstream string) (*Gate, error) {
	return l.gates.get(client, upstream, l.client(client).Limits.For(upstream))
}

// Do sends a live request: its client's allowed upstreams and models
// (Access) and its budget are checked at once (a *RefusalError otherwise), its client's own limit on each upstream
// is waited for in that upstream's queue (the Gate), and the router sends
// it to its upstream or, when that is unavailable or cannot make the
// deadline, to a fallback (Target.Models rewrites the model). The answer
// says who served it (Response.Upstream); trail, when not nil, records
// every upstream tried and its attempts. The spend is settled when the
// response's body ends or is closed. noFallback keeps it on upstream.
func (l *Layer) Do(ctx context.Context, upstreamName string, req *dispatch.Request, noFallback bool, trail *Trail) (*dispatch.Response, error) {
	if err := l.Permit(req.Client, upstreamName, req.Cost.Model); err != nil {
		return nil, err
	}
	allowed := func(t Target) bool { return l.allows(req.Client, t.Upstream, t.model(req.Cost.Model)) }
	return l.router.do(ctx, upstreamName, req, noFallback, trail, allowed, l.send)
}

// send admits req on target t and hands it to t's engine: the client's
// service tier allow-list (a *RefusalError), the budget's
// reservation (refused at once, then written to the store), the client's
// gate on t (waited for in the engine's queue), then the engine; the
// reservation is settled when the body ends, or refunded when the engine
// gives up.
func (l *Layer) send(ctx context.Context, t Target, req *dispatch.Request) (*dispatch.Response, error) {
	if rf := l.checkTier(t.Protocol, req.Client, req.Cost.ServiceTier); rf != nil {
		return nil, l.refused(req.Client, t.Upstream, rf)
	}
	h, err := l.spend.reserve(req.Client, t.Upstream, t.Protocol, req)
	if err != nil {
		return nil, l.refused(req.Client, t.Upstream, l.refusal(t, err))
	}
	g, err := l.gate(req.Client, t.Upstream)
	if err != nil {
		h.refund()
		return nil, err
	}
	if g != nil {
		req.Gate = g
	}
	if err := l.spend.persist(ctx, h); err != nil {
		h.refund()
		return nil, err
	}
	resp, err := t.engine.Do(ctx, req)
	if err != nil {
		h.refund()
		return nil, err
	}
	if resp.Body == nil {
		end, ended := resp.End()
		h.settle(end, ended)
		return resp, nil
	}
	resp.Body = &spendBody{ReadCloser: resp.Body, resp: resp, hold: h}
	return resp, nil
}

// Settler settles an admitted call once it has ended (*Admission).
type Settler interface {
	// Settle ends the admission with how the call ended (ended false: it
	// failed without an answer's body) and returns its cost in US
	// dollars.
	Settle(end dispatch.End, ended bool) float64
}

// Admission is a job's call admitted by AdmitNow: its budget reservation
// and its slot at its client's gate. Settle it once the call has ended.
type Admission struct {
	hold  *spendHold
	gate  *Gate
	cost  provider.Cost
	clock clock.Clock
}

// AdmitNow admits a job's call to target t at once (req as t takes it:
// Target.Rewrite): its client's allowed upstreams and models (a *RefusalError,
// for good; a *HeldError for a fallback it may not use, which it waits out for
// its own upstream), its client's service tier allow-list (a *RefusalError,
// for good), its client's budget (a *RefusalError when it cannot hold the
// call) and its client's own limit on t (a *HeldError, saying when to come
// back, when the client is over it: the job waits in the store without
// burning an attempt, and is never recorded as a rate limit). A call
// admitted waits for its budget's reservation to be written to the store
// (at most Config.HoldTimeout); one admitted on a fallback is counted as
// a fallback taken (Observer.FallbackTaken, with Target.Reason).
func (l *Layer) AdmitNow(t Target, req *dispatch.Request) (Settler, error) {
	if !l.allows(req.Client, t.Upstream, req.Cost.Model) {
		if t.fallback {
			return nil, l.held(req.Client, t.Upstream, HeldFallbackAccess, &HeldError{RetryAt: l.clock.Now().Add(AccessHeldFor),
				Limit: fmt.Sprintf("client %s's allowed upstreams and models (the fallback %s)", req.Client, t.Upstream)})
		}
		return nil, l.refused(req.Client, t.Upstream, accessRefusal(req.Client, t.Upstream, req.Cost.Model, l.client(req.Client).Access))
	}
	if rf := l.checkTier(t.Protocol, req.Client, req.Cost.ServiceTier); rf != nil {
		return nil, l.refused(req.Client, t.Upstream, rf)
	}
	h, err := l.spend.reserve(req.Client, t.Upstream, t.Protocol, req)
	if err != nil {
		return nil, l.refused(req.Client, t.Upstream, l.refusal(t, err))
	}
	g, err := l.gate(req.Client, t.Upstream)
	if err != nil {
		h.refund()
		return nil, err
	}
	if g != nil {
		now := l.clock.Now()
		gw, err := g.Take(req.Cost, now)
		if err != nil {
			h.refund()
			return nil, err
		}
		if gw.Waits() {
			h.refund()
			return nil, l.held(req.Client, t.Upstream, HeldClientLimit, &HeldError{RetryAt: g.turn(now, gw.For, amount(req.Cost)), Limit: gw.Limit})
		}
	}
	// Bounded by the hold timeout; never fails without a context to end.
	_ = l.spend.persist(context.Background(), h)
	if t.fallback {
		l.obs.FallbackTaken(t.of, t.Upstream, t.reason)
	}
	return &Admission{hold: h, gate: g, cost: req.Cost, clock: l.clock}, nil
}

// Settle ends the admission with how the call ended (ended false: it
// failed without an answer's body; nothing billed): the client's slot is
// freed and its rate charge corrected, and the spend settled. It returns
// the call's cost in US dollars.
func (a *Admission) Settle(end dispatch.End, ended bool) float64 {
	if a == nil {
		return 0
	}
	if a.gate != nil {
		ge := dispatch.GateEnd{Sent: ended}
		if ended && end.HasUsage {
			u := end.Usage
			ge.Usage = &u
		}
		a.gate.Done(a.cost, ge, a.clock.Now())
	}
	return a.hold.settle(end, ended).Dollars()
}

// Reserved is the worst case the admission holds against its client's
// budget, in US dollars (until Settle).
func (a *Admission) Reserved() float64 {
	if a == nil || a.hold == nil {
		return 0
	}
	return a.hold.hold.Amount().Dollars()
}

// Held is a job's call its client's own limit holds back: it comes back
// at RetryAt, its client's next free turn, without an attempt.
type HeldError struct {
	RetryAt time.Time
	// Limit names the limit ("client acme's requests_per_minute (30) on
	// claude").
	Limit string
}

func (h *HeldError) Error() string {
	return fmt.Sprintf("held back by %s until %s", h.Limit, h.RetryAt.UTC().Format(time.RFC3339))
}

// SpentOn returns a function that tells the cost, in US dollars, settled
// for a response Do returned: 0 before its body ended, or without a
// budget charge; once the body has ended it settles it first, if that is
// not done yet. Take it before wrapping the response's body.
func SpentOn(resp *dispatch.Response) func() float64 {
	if resp == nil {
		return func() float64 { return 0 }
	}
	b, ok := resp.Body.(*spendBody)
	if !ok {
		return func() float64 { return 0 }
	}
	return func() float64 {
		select {
		case <-resp.Ended():
			b.settle() // once: a no-op when the body's Close settled it
		default:
		}
		return b.hold.costSoFar().Dollars()
	}
}

// ClientLimits lists the gates in use (per client and upstream) and their
// room, for /v1/status.
func (l *Layer) ClientLimits(now time.Time) []ClientLimitStatus { return l.gates.status(now) }

// Spend is the spend section of /v1/status.
func (l *Layer) Spend(now time.Time) *SpendStatus { return l.spend.status(now) }

// Unmetered reports whether a pass-through request of client must be
// refused because the client has a budget and the request may be billed
// (anything but GET, HEAD, DELETE, OPTIONS and token counting).
func (l *Layer) Unmetered(client, method, path string) bool {
	return l.spend.unmetered(client, method, path)
}

// Account returns client's budget windows at now.
func (l *Layer) Account(client string, now time.Time) quota.Account {
	return l.spend.ledger.Account(client, now)
}

// Flush does now what the layer does every SpendFlushEvery and at Stop:
// it writes the holds queued (renewing this process's lease) and the
// spend settled since the last flush to the store, and on a shared store
// charges the holds of dead processes and reads back the others' spend.
func (l *Layer) Flush(ctx context.Context) error { return l.spend.flush(ctx) }

// Tenants is the cluster the layer shares the clients' limits and budgets
// with (nil when it does not).
func (l *Layer) Tenants() *cluster.Tenants {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenants
}

// Accounts returns every client's budget windows at now, for the
// metrics collector.
func (l *Layer) Accounts(now time.Time) []quota.Account { return l.spend.ledger.Accounts(now) }
