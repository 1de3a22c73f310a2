package admit

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/lifecycle"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/internal/quota"
)

// Spend budgets (docs/budgets.md). Every scheduled request, live or a
// job's call, goes through spender.reserve before the engine sees it: its
// worst case (the input estimate plus max_tokens, priced by the table) is
// reserved against its client's budget, and settled with the cost of the
// usage the engine read from the answer once the body ends (refunded when
// the call failed without usage). A client with a budget has its
// reservation written to the store before the request is sent, and its
// settlement written as it comes (spender.persist, spend_journal.go), so
// a crash loses none of it; the spend of clients without a budget is
// added to the store in batches every SpendFlushEvery and on Stop. All of
// it is read back at Start, so budgets survive restarts and crashes.

// SpendFlushEvery is how often settled spend is written to the store.
const SpendFlushEvery = 5 * time.Second

// maxUnknownModelsLogged bounds the set of unpriced model names warned
// about once each.
const maxUnknownModelsLogged = 1000

// spender is the gateway's budgets and spend accounting. Safe for
// concurrent use; reserve and settle are O(1) and never touch the store
// (persist waits for the journal's write).
type spender struct {
	prices  *pricing.Table
	ledger  *quota.Ledger
	clock   clock.Clock
	log     *slog.Logger
	budgets atomic.Pointer[map[string]bool] // clients with a budget (replaced whole by setBudgets)
	obs     Observer

	mu      sync.Mutex
	pending map[spendKey]*spendDelta // settled, not yet in the store
	totals  map[spendLabel]*spendDelta
	unknown map[string]bool // unpriced models already warned about

	store SpendStore // nil: spend kept in memory only
	// awaiting is set while the store the spend is kept in has not been
	// loaded (Layer.AwaitSpendStore): budgeted clients are refused.
	awaiting atomic.Bool
	// journal writes the holds of budgeted requests to the store (nil
	// while the spend is kept in memory only); holdTimeout is how long a
	// request waits for its hold.
	journal     *spendJournal
	holdTimeout time.Duration
	// io is held while the spender talks to the store (the loop's writes,
	// a flush, a sync), so a sync never sees a write of its own in flight.
	io sync.Mutex
	// shared is set when other gateways may write to the same store
	// (PostgreSQL): after each flush the windows are rebased on the
	// store's sums, so every node enforces what all of them spent.
	shared    bool
	flushFail bool // the last flush failed (logged once)
	// tenants shares the budgets with the cluster when the spend is
	// shared too (budget_share.go); nil otherwise. joined holds the
	// clients joined (*budgetShare).
	tenants     atomic.Pointer[cluster.Tenants]
	joined      sync.Map
	joinTimeout time.Duration
	// flusher runs the flush loop while the spend is kept in a store
	// (spend_store.go).
	flusher lifecycle.Base
}

// spendLabel is the bounded breakdown of spend: the client, the upstream
// and the price table's entry (never the raw model name from a request).
type spendLabel struct{ client, upstream, model string }

type spendKey struct {
	spendLabel
	day time.Time
}

type spendDelta struct {
	nanos    pricing.Amount
	requests int64
}

func newSpender(prices pricing.Config, shared bool, holdTimeout time.Duration, clk clock.Clock, log *slog.Logger, obs Observer) (*spender, error) {
	tab, err := pricing.NewTable(prices)
	if err != nil {
		return nil, fmt.Errorf("prices.%w", err)
	}
	sp := &spender{prices: tab, ledger: quota.NewLedger(), clock: clk, log: log, obs: obs, shared: shared,
		holdTimeout: cmp.Or(holdTimeout, HoldTimeoutDefault),
		pending:     map[spendKey]*spendDelta{}, totals: map[spendLabel]*spendDelta{}, unknown: map[string]bool{}}
	return sp, nil
}

// setBudgets applies the clients' budgets, keeping every client's spend
// and reservations (a config reload calls it with the new clients; a
// client no longer listed keeps its spend but loses its limits).
func (sp *spender) setBudgets(clients []Client) {
	now := sp.clock.Now()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	listed := map[string]bool{}
	for _, c := range clients {
		lim := c.Budget.limits()
		sp.ledger.SetLimits(c.Name, lim, now)
		listed[c.Name] = lim.Any()
	}
	if old := sp.budgets.Load(); old != nil {
		for c := range *old {
			if _, ok := listed[c]; !ok {
				sp.ledger.SetLimits(c, quota.Limits{}, now)
			}
		}
	}
	sp.budgets.Store(&listed)
}

// hasBudget reports whether client has a budget.
func (sp *spender) hasBudget(client string) bool {
	b := sp.budgets.Load()
	return b != nil && (*b)[client]
}

// unmetered reports whether a pass-through request of client must be
// refused because the client has a budget and the request may be billed:
// anything but GET, HEAD, DELETE, token counting
// (/v1/messages/count_tokens, /v1/responses/input_tokens) and the cancel
// of a stored response (/v1/responses/{id}/cancel), which the providers
// do not charge.
func (sp *spender) unmetered(client, method, path string) bool {
	if sp == nil || !sp.hasBudget(client) {
		return false
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		return false
	}
	if _, ok := provider.ResponsesPathID(path); ok && strings.HasSuffix(path, "/cancel") {
		return false
	}
	return !provider.CountsTokens(path)
}

// worstPrefix is the cacheable prefix of req that its worst case must
// price apart: one with a 1-hour breakpoint, on Anthropic, when price
// makes a 1-hour write dearer than the other input rates. Else (most
// requests: the body is not read) the zero value.
func worstPrefix(protocol llm.Protocol, price pricing.Price, req *dispatch.Request) provider.CachePrefix {
	p := price.WithDefaults()
	if protocol != llm.Anthropic || p.CacheWrite1h <= max(p.Input, p.CacheWrite) || !bytes.Contains(req.Body, []byte(`"1h"`)) {
		return provider.CachePrefix{}
	}
	prefix, _ := provider.CachePrefixOf(protocol, req.Endpoint, req.Body, nil)
	return prefix
}

// spendRefusedError is a request refused by its client's budget (or by the price
// table, for an unpriced model of a client with a budget); spendProblem
// renders it.
type spendRefusedError struct{ err error }

func (e *spendRefusedError) Error() string { return e.err.Error() }
func (e *spendRefusedError) Unwrap() error { return e.err }

// spendHold is one request's reservation. settle is called once its body
// ended or was closed; later calls do nothing.
type spendHold struct {
	sp       *spender
	label    spendLabel
	price    pricing.Price
	tier     string // the service tier the request asked for
	protocol llm.Protocol
	hold     quota.Hold
	seq      int64 // its hold in the store (persist); 0: kept in memory only. Guarded by sp.mu.

	once sync.Once
	cost pricing.Amount // what it settled at
	mu   sync.Mutex     // guards cost for the log line
}

// reserve prices req (for client, on upstream speaking protocol) and
// reserves its worst case. It fails with *spendRefusedError when the client's
// budget cannot hold it.
func (sp *spender) reserve(client, upstream string, protocol llm.Protocol, req *dispatch.Request) (*spendHold, error) {
	// The worst case is priced in the tier the request asks for (no tier,
	// auto: the standard price); the settlement in the tier its answer
	// reports.
	m, h, err := sp.reserveWorst(protocol, client, req, req.Cost.ServiceTier)
	if err != nil {
		return nil, err
	}
	return &spendHold{sp: sp, label: spendLabel{client: client, upstream: upstream, model: m.Entry},
		price: m.Price, tier: req.Cost.ServiceTier, protocol: protocol, hold: h}, nil
}

// reserveWorst prices req, a call of protocol, for client and reserves
// its worst case at tier's price against the client's budget: the rule every door's
// reservation obeys. It fails with *spendRefusedError when the budget
// cannot hold it, the model is unpriced under prices.unknown: refuse, or
// the spend is not loaded yet.
func (sp *spender) reserveWorst(protocol llm.Protocol, client string, req *dispatch.Request, tier string) (pricing.Match, quota.Hold, error) {
	if sp.awaiting.Load() && sp.hasBudget(client) {
		sp.refused(client, ErrSpendNotLoaded)
		return pricing.Match{}, quota.Hold{}, &spendRefusedError{err: ErrSpendNotLoaded}
	}
	m, err := sp.prices.Lookup(req.Cost.Model)
	if !m.Known {
		sp.warnUnknown(req.Cost.Model, err != nil && sp.hasBudget(client))
	}
	if err != nil && sp.hasBudget(client) {
		sp.refused(client, err)
		return pricing.Match{}, quota.Hold{}, &spendRefusedError{err: err}
	}
	price := m.Price.Scaled(sp.prices.TierFactor(tier))
	need := price.Worst(req.Cost, worstPrefix(protocol, price, req))
	sp.joinBudget(client) // on a cluster, this node's share first
	now := sp.clock.Now()
	h, err := sp.ledger.Reserve(client, need, now)
	if err != nil {
		if e, ok := errors.AsType[*quota.ExceededError](err); ok && e.First {
			sp.log.Warn("budget exhausted: refusing the client's requests until it resets", "client", client,
				"window", string(e.Window), "limit_usd", e.Limit.Dollars(), "used_usd", e.Used.Dollars(),
				"resets_at", e.ResetsAt)
		}
		sp.refused(client, err)
		return pricing.Match{}, quota.Hold{}, &spendRefusedError{err: err}
	}
	return m, h, nil
}

func (sp *spender) warnUnknown(model string, refused bool) {
	sp.mu.Lock()
	seen, full := sp.unknown[model], len(sp.unknown) >= maxUnknownModelsLogged
	if !seen && !full {
		sp.unknown[model] = true
	}
	sp.mu.Unlock()
	if seen || full {
		return // warned already, or too many names to remember: never a line per request
	}
	if refused {
		sp.log.Warn("no price for a model: refusing it for clients with a budget (prices.unknown: refuse)", "model", model)
		return
	}
	sp.log.Warn("no price for a model: its spend is counted at the fallback price (add it under prices.models)", "model", model)
}

// settle charges what the call cost: the usage the engine read when there
// is one; the worst case for a success that reported none, or a stream
// its client left that the engine could not read on to its usage;
// nothing (a refund) for a call that failed without usage. It returns the
// cost.
func (h *spendHold) settle(end dispatch.End, ended bool) pricing.Amount {
	if h == nil {
		return 0
	}
	h.once.Do(func() {
		var cost pricing.Amount
		switch {
		case ended && end.HasUsage:
			// The tier that served it, as the answer reports it; else
			// the tier asked for.
			tier := cmp.Or(end.Usage.ServiceTier, h.tier)
			cost = h.price.Scaled(h.sp.prices.TierFactor(tier)).Cost(h.protocol, end.Usage)
			if tier == FlexTier {
				h.sp.obs.FlexSpent(h.label.upstream, cost.Dollars(), h.price.Cost(h.protocol, end.Usage).Dollars())
			}
		case ended && (end.Outcome.Kind == llm.Success || end.Abandoned):
			// A success without usage, or a stream its client left and
			// the engine could not read to its end: the worst case, never
			// less than the provider may bill.
			cost = h.hold.Amount()
		}
		h.mu.Lock()
		h.cost = cost
		h.mu.Unlock()
		h.sp.charge(h, cost)
	})
	return h.costSoFar()
}

// refund gives the whole reservation back (nothing was sent, or nothing
// was billed).
func (h *spendHold) refund() { h.settle(dispatch.End{}, false) }

func (h *spendHold) costSoFar() pricing.Amount {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cost
}

func (sp *spender) charge(h *spendHold, cost pricing.Amount) {
	now := sp.clock.Now()
	sp.obs.Spent(h.label.client, h.label.upstream, h.label.model, cost.Dollars())
	// The ledger and the pending spend change together under sp.mu, so a
	// rebase (sync) sees each settled cost exactly once: in the store or
	// in pending.
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.ledger.Settle(h.hold, cost, now)
	if h.seq != 0 && sp.journal != nil {
		// Its hold went to the store: the settlement replaces it there.
		sp.journal.settleHold(h, cost, now)
		sp.journal.wake()
		if cost > 0 {
			sp.addTotal(h.label, cost, 1)
		}
		return
	}
	if cost == 0 {
		return
	}
	k := spendKey{spendLabel: h.label, day: quota.DayStart(now)}
	d := sp.pending[k]
	if d == nil {
		d = &spendDelta{}
		sp.pending[k] = d
	}
	d.nanos += cost
	d.requests++
	sp.addTotal(h.label, cost, 1)
}

func (sp *spender) addTotal(l spendLabel, cost pricing.Amount, n int64) {
	t := sp.totals[l]
	if t == nil {
		t = &spendDelta{}
		sp.totals[l] = t
	}
	t.nanos += cost
	t.requests += n
}

// spendBody settles its request's hold when the body ends or is closed,
// with what the engine read from it.
type spendBody struct {
	io.ReadCloser
	resp *dispatch.Response
	hold *spendHold
}

func (b *spendBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.settle()
	}
	return n, err
}

func (b *spendBody) Close() error {
	err := b.ReadCloser.Close()
	select {
	case <-b.resp.Ended():
		b.settle()
	default:
		// A stream its client left: the engine reads on to its usage and
		// the hold settles with it.
		go func() {
			<-b.resp.Ended()
			b.settle()
		}()
	}
	return err
}

func (b *spendBody) settle() {
	end, ok := b.resp.End()
	b.hold.settle(end, ok)
}
