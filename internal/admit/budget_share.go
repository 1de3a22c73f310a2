package admit

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/pricing"
)

// Spend budgets on a cluster (docs/budgets.md, "Many gateways"): when the
// spend is shared through the store and quotas through a cluster, each
// client with a budget is a tenant of the cluster (key cluster.BudgetKey)
// joined at its first reservation. The share it is granted goes to the
// ledger (quota.Ledger.SetShare): this node commits (reserves in flight,
// plus its spend the other nodes may not have read back yet) at most its
// share of the budget's remainder, so the nodes' commitments together
// never exceed it. Its demand is what it commits plus what its share
// refused since the last sync, in dollars.

// spendVisibleAfter is how long spend written to the store may take to
// reach every node: each reads the store back after its own flush, every
// SpendFlushEvery; twice that leaves a whole period for a slow read.
const spendVisibleAfter = 2 * SpendFlushEvery

// budgetShare is one client's budget as a cluster.Tenant.
type budgetShare struct {
	sp     *spender
	client string

	prevRefused pricing.Amount // guarded by the tenant's sync (one at a time)
}

func (b *budgetShare) Key() string { return cluster.BudgetKey(b.client) }

// Load implements cluster.Tenant.
func (b *budgetShare) Load(now time.Time) cluster.TenantLoad {
	s := b.sp.ledger.Shared(b.client, now)
	refused := s.Refused - b.prevRefused
	b.prevRefused = s.Refused
	return cluster.TenantLoad{Demand: (s.Committed + max(refused, 0)).Dollars(), Using: s.Using,
		Idle: s.Committed == 0 && refused <= 0}
}

// Apply implements cluster.Tenant.
func (b *budgetShare) Apply(g cluster.TenantGrant) {
	b.sp.ledger.SetShare(b.client, g.Share, b.sp.clock.Now())
}

// joinBudget makes client's budget a tenant of the cluster the first
// time it reserves (and again after it left for being idle), when budgets
// are shared (a cluster, and the spend shared through the store).
func (sp *spender) joinBudget(client string) {
	t := sp.tenants.Load()
	if t == nil || !sp.hasBudget(client) {
		return
	}
	b, ok := sp.joined.Load(client)
	if !ok {
		b, _ = sp.joined.LoadOrStore(client, &budgetShare{sp: sp, client: client})
	}
	if t.Has(cluster.BudgetKey(client)) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sp.joinTimeout)
	defer cancel()
	t.Join(ctx, b.(*budgetShare)) // at once when joined already
}
