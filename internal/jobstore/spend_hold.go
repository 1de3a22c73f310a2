package jobstore

import (
	"strings"
	"time"
)

// Spend holds (docs/budgets.md, "What survives a crash"): the worst case
// of a budgeted request, written by the gateway process that admitted it
// before the request is sent, and deleted when the request settles, in
// the same statement that adds what it really cost to sluice_spend. A
// hold still open when its process died is charged at its worst case by
// ReapSpendHolds: the provider may have billed it. The holds of a live
// process are never charged: each carries a lease its owner renews, and
// only holds whose lease has ended (or, with one gateway on the store,
// every hold but the caller's) are reaped.

// SpendHold is one open reservation.
type SpendHold struct {
	// Owner is the process that holds it (one id per process start).
	Owner string
	// Seq numbers the owner's holds.
	Seq      int64
	Client   string
	Upstream string
	// Model is the price table's entry that priced the request.
	Model string
	// Nanos is the worst case reserved, in nano-dollars (1e-9 USD).
	Nanos int64
	// LeaseUntil is when the hold may be reaped unless its owner renews
	// it; CreatedAt when it was written. Both are set by the store.
	LeaseUntil time.Time
	CreatedAt  time.Time
}

// SpendSettlement settles one of the owner's holds.
type SpendSettlement struct {
	Seq int64
	// Nanos is what the request cost (0: a refund), added to the hold's
	// client, upstream and model on Day's UTC day.
	Nanos int64
	Day   time.Time
}

// WriteSpendHoldsParams opens and settles holds of one owner, in one
// transaction.
type WriteSpendHoldsParams struct {
	Owner string
	// Open are new holds; their Owner, LeaseUntil and CreatedAt are
	// taken from the params. A hold already open (a retried write whose
	// first answer was lost) is left as it is.
	Open []SpendHold
	// Settle deletes each hold and adds its cost to the spend. A hold no
	// longer open (settled by an earlier write whose answer was lost, or
	// charged by ReapSpendHolds after the owner's lease ended) adds
	// nothing: it was counted already.
	Settle []SpendSettlement
	// Renew extends every hold of Owner still open to LeaseUntil.
	Renew bool
	// LeaseUntil is the lease of the holds opened or renewed.
	LeaseUntil time.Time
	Now        time.Time
}

// SpendHoldsParams selects open holds.
type SpendHoldsParams struct{}

// ReapSpendHoldsParams charges the holds of dead processes.
type ReapSpendHoldsParams struct {
	// Except is the caller's own owner id: its holds are never reaped.
	Except string
	// All reaps every other owner's holds whatever their lease (one
	// gateway on its store: every other owner is a process that ended);
	// otherwise only those whose lease ended at or before Now.
	All bool
	// Now dates the charges (their UTC day).
	Now time.Time
}

func (p *WriteSpendHoldsParams) validate() error {
	switch {
	case strings.TrimSpace(p.Owner) == "":
		return invalid("Owner", "required")
	case p.Now.IsZero():
		return invalid("Now", "required")
	case (len(p.Open) > 0 || p.Renew) && p.LeaseUntil.IsZero():
		return invalid("LeaseUntil", "required to open or renew holds")
	}
	for i, h := range p.Open {
		switch {
		case strings.TrimSpace(h.Client) == "":
			return invalid("Open", "hold %d: Client required", i)
		case h.Nanos < 0:
			return invalid("Open", "hold %d: Nanos must be >= 0", i)
		}
	}
	for i, s := range p.Settle {
		switch {
		case s.Nanos < 0:
			return invalid("Settle", "settlement %d: Nanos must be >= 0", i)
		case s.Day.IsZero():
			return invalid("Settle", "settlement %d: Day required", i)
		}
	}
	return nil
}

func (p *ReapSpendHoldsParams) validate() error {
	if p.Now.IsZero() {
		return invalid("Now", "required")
	}
	return nil
}
