package admit

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// SpendStatus is the spend section of GET /v1/status (docs/budgets.md).
type SpendStatus struct {
	// PricesAsOf dates the shipped prices (overrides are the config's).
	PricesAsOf string `json:"prices_as_of"`
	// Clients lists every client that has a budget or spent something,
	// by name.
	Clients []ClientSpend `json:"clients"`
}

// ClientSpend is one client's spend and budget windows.
type ClientSpend struct {
	Client string `json:"client"`
	// Day, Month and Total are the budget windows (UTC); a window without
	// a limit still reports its spend.
	Day   WindowSpend `json:"day"`
	Month WindowSpend `json:"month"`
	Total WindowSpend `json:"total"`
	// ReservedUSD is the worst case of the client's requests in flight:
	// this gateway's, and on a shared store those the others hold
	// (docs/budgets.md).
	ReservedUSD float64 `json:"reserved_usd"`
	// ClusterShare is, when the budget is shared by a cluster
	// (budget_share.go), this node's share of its remainder, and
	// ClusterCommittedUSD what this node commits against it (in flight,
	// plus its spend the other nodes may not have read back yet).
	ClusterShare        *float64 `json:"cluster_share,omitempty"`
	ClusterCommittedUSD *float64 `json:"cluster_committed_usd,omitempty"`
	// By breaks the client's spend down by upstream and price-table model,
	// since the store began keeping it.
	By []ModelSpend `json:"by"`
}

// WindowSpend is one budget window.
type WindowSpend struct {
	SpentUSD float64 `json:"spent_usd"`
	// LimitUSD and RemainingUSD are absent when the window has no limit.
	LimitUSD     *float64   `json:"limit_usd,omitempty"`
	RemainingUSD *float64   `json:"remaining_usd,omitempty"`
	ResetsAt     *time.Time `json:"resets_at,omitempty"`
}

// ModelSpend is a client's spend on one upstream and model.
type ModelSpend struct {
	Upstream string  `json:"upstream"`
	Model    string  `json:"model"`
	USD      float64 `json:"usd"`
	Requests int64   `json:"requests"`
}

func (sp *spender) status(now time.Time) *SpendStatus {
	out := &SpendStatus{PricesAsOf: pricing.PricesAsOf, Clients: []ClientSpend{}}
	by := map[string][]ModelSpend{}
	sp.mu.Lock()
	for l, t := range sp.totals {
		by[l.client] = append(by[l.client], ModelSpend{Upstream: l.upstream, Model: l.model, USD: t.nanos.Dollars(), Requests: t.requests})
	}
	sp.mu.Unlock()
	for _, a := range sp.ledger.Accounts(now) {
		if !sp.hasBudget(a.Client) && len(by[a.Client]) == 0 && a.Day.Reserved == 0 {
			continue
		}
		ms := by[a.Client]
		slices.SortFunc(ms, func(x, y ModelSpend) int {
			return cmp.Or(cmp.Compare(x.Upstream, y.Upstream), cmp.Compare(x.Model, y.Model))
		})
		if ms == nil {
			ms = []ModelSpend{}
		}
		cs := ClientSpend{Client: a.Client, Day: windowSpend(a.Day), Month: windowSpend(a.Month),
			Total: windowSpend(a.Total), ReservedUSD: a.Day.Reserved.Dollars(), By: ms}
		if _, joined := sp.joined.Load(a.Client); joined && sp.tenants.Load() != nil {
			sh := sp.ledger.Shared(a.Client, now)
			committed := sh.Committed.Dollars()
			cs.ClusterShare, cs.ClusterCommittedUSD = &sh.Share, &committed
		}
		out.Clients = append(out.Clients, cs)
	}
	slices.SortFunc(out.Clients, func(x, y ClientSpend) int { return cmp.Compare(x.Client, y.Client) })
	return out
}

func windowSpend(u quota.Usage) WindowSpend {
	w := WindowSpend{SpentUSD: u.Spent.Dollars()}
	if u.Limit > 0 {
		lim, rem := u.Limit.Dollars(), u.Remaining().Dollars()
		w.LimitUSD, w.RemainingUSD = &lim, &rem
		if !u.ResetsAt.IsZero() {
			t := u.ResetsAt.UTC()
			w.ResetsAt = &t
		}
	}
	return w
}
