package admit

import (
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
)

// Spend of the lines of provider batches (docs/budgets.md, "Jobs routed to
// a provider's Batch API"). The job runtime prices each line's usage here
// (PriceBatchLine: the provider's batch price, its cache reads and writes
// at their rates), writes it to the store in the transaction that writes
// the line back to its job (so a line is charged once, whatever the
// polls, restarts or nodes), then tells the ledger (BatchCharged), which
// enforces budgets on it without writing it again.

// BatchTier is the service tier a provider's Batch API bills in
// (pricing.Config.Tiers: 0.5 by default).
const BatchTier = "batch"

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

// BatchCharged tells the ledger of a line's cost that the store already
// holds (written with the line): the client's windows and the spend
// totals count it, and nothing is written to the store again.
func (l *Layer) BatchCharged(client, upstream string, c BatchLineCost) {
	sp := l.spend
	cost, entry := c.Batch, c.Entry
	if cost <= 0 {
		return
	}
	now := sp.clock.Now()
	sp.obs.Spent(client, upstream, entry, cost.Dollars())
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.ledger.Charge(client, cost, 0, now)
	sp.addTotal(spendLabel{client: client, upstream: upstream, model: entry}, cost, 1)
}
