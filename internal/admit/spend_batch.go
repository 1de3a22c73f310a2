package admit

import (
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// Spend of the lines of provider batches (docs/budgets.md, "Jobs routed to
// a provider's Batch API"). Before a routed job is put in a provider
// batch, the batch router admits its line here (ReserveBatchLine: the
// client's allowed upstreams and models, its service tiers, and its
// budget, which holds the line's worst case at the batch price while the
// batch runs). The router prices each line's usage here (PriceBatchLine:
// the provider's batch price, its cache reads and writes at their rates),
// writes it to the store in the transaction that writes the line back to
// its job (so a line is charged once, whatever the polls, restarts or
// nodes), then tells the ledger (BatchCharged), which settles the line's
// hold with it without writing it again.

// BatchTier is the service tier a provider's Batch API bills in
// (pricing.Config.Tiers: 0.5 by default).
const BatchTier = "batch"

// FlexTier is OpenAI's flex service tier, as an answer reports it
// (pricing.Config.Tiers: 0.5 by default).
const FlexTier = "flex"

// BatchLineCost is what one line of a provider batch cost.
type BatchLineCost struct {
	// Entry is the price table's entry that priced it (the model label).
	Entry string
	// Batch is its cost at the batch price; Standard what the same usage
	// costs on the synchronous path (the money routing saved is the
	// difference).
	Batch, Standard pricing.Amount
}

// PriceBatchLine prices usage of model, answered by upstream speaking
// protocol through its Batch API.
func (l *Layer) PriceBatchLine(protocol llm.Protocol, model string, usage llm.Usage) BatchLineCost {
	sp := l.spend
	m, _ := sp.prices.Lookup(model)
	if !m.Known {
		sp.warnUnknown(model, false)
	}
	return BatchLineCost{Entry: m.Entry,
		Batch:    m.Price.Scaled(sp.prices.TierFactor(BatchTier)).Cost(protocol, usage),
		Standard: m.Price.Cost(protocol, usage)}
}

// BatchHold is a provider batch line's worst case at the batch price,
// reserved against its client's budget from before the line is sent until
// it is written back. It is held in this process's ledger only (the
// line's cost reaches the store with its write-back, never a hold): a
// process that dies with lines in flight leaves nothing to charge, and
// the router that takes their group over holds them again
// (HoldBatchLine). The zero BatchHold holds nothing.
type BatchHold struct{ h quota.Hold }

// Amount is what h holds.
func (h BatchHold) Amount() pricing.Amount { return h.h.Amount() }

// ReserveBatchLine admits req, a routed job's call to upstream t, to a
// provider batch: its client's allowed upstreams and models, its service
// tier allow-list (a *RefusalError, for good), and its budget, which must hold
// its worst case at the batch price (BatchTier) in every window, as any
// door's request (a *RefusalError: RetryAt set when the window resets or the
// reservations in flight settle, zero when it never will). Nothing is
// sent for a refused line. The client's own rate limits are the
// synchronous path's and are not taken.
func (l *Layer) ReserveBatchLine(t Target, req *dispatch.Request) (BatchHold, error) {
	if !l.allows(req.Client, t.Upstream, req.Cost.Model) {
		return BatchHold{}, l.refused(req.Client, t.Upstream, accessRefusal(req.Client, t.Upstream, req.Cost.Model, l.client(req.Client).Access))
	}
	if rf := l.checkTier(t.Protocol, req.Client, req.Cost.ServiceTier); rf != nil {
		return BatchHold{}, l.refused(req.Client, t.Upstream, rf)
	}
	_, h, err := l.spend.reserveWorst(t.Protocol, req.Client, req, BatchTier)
	if err != nil {
		return BatchHold{}, l.refused(req.Client, t.Upstream, l.refusal(t, err))
	}
	return BatchHold{h: h}, nil
}

// HoldBatchLine holds the worst case of req, a call of protocol in a line
// already in a provider batch (a group this router took over from a
// process that died or lost its lease), against its client's budget
// whatever the budget says: the line is sent, and may be billed up to
// that.
func (l *Layer) HoldBatchLine(protocol llm.Protocol, req *dispatch.Request) BatchHold {
	sp := l.spend
	m, _ := sp.prices.Lookup(req.Cost.Model)
	price := m.Price.Scaled(sp.prices.TierFactor(BatchTier))
	need := price.Worst(req.Cost, worstPrefix(protocol, price, req))
	return BatchHold{h: sp.ledger.Force(req.Client, need, sp.clock.Now())}
}

// ReleaseBatchLine gives h back: its line was not billed (canceled,
// expired, errored at the provider, or never sent), or another router
// wrote it back.
func (l *Layer) ReleaseBatchLine(h BatchHold) {
	l.spend.ledger.Settle(h.h, 0, l.spend.clock.Now())
}

// BatchCharged tells the ledger of a line's cost that the store already
// holds (written with the line), settling its hold h: the client's
// windows and the spend totals count it, and nothing is written to the
// store again.
func (l *Layer) BatchCharged(client, upstream string, c BatchLineCost, h BatchHold) {
	sp := l.spend
	cost, entry := c.Batch, c.Entry
	now := sp.clock.Now()
	if cost <= 0 {
		sp.ledger.Settle(h.h, 0, now)
		return
	}
	sp.obs.Spent(client, upstream, entry, cost.Dollars())
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if h == (BatchHold{}) {
		sp.ledger.Charge(client, cost, 0, now) // a line nobody held
	} else {
		sp.ledger.Settle(h.h, cost, now)
	}
	sp.addTotal(spendLabel{client: client, upstream: upstream, model: entry}, cost, 1)
}
