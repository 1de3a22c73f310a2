package admit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// Durable reservations (docs/budgets.md, "What survives a crash"). A
// request of a client with a budget is sent only once its worst case is
// in the store as a spend hold (jobstore.SpendHold) owned by this process;
// its settlement deletes the hold and adds what it cost in one statement.
// So whatever the moment a process dies, each request it sent is in the
// store either as its cost or as its open hold, and the next start charges
// the open holds of dead processes at their worst case (the provider may
// have billed them): after a crash a budget counts at least what was sent.
//
// Holds are written by the spender's loop alone, in group commits: the
// holds opened and settled while a write is in flight all go in the next
// one, so a request waits one store round trip (two under load), not one
// per request ahead of it. Settlements are not waited for: until written,
// a settled request is still an open hold in the store, which only
// overcounts.
//
// When the store does not answer within HoldTimeout, the request is sent
// all the same (live traffic never waits on the store) and the journal is
// degraded: until a write succeeds again, requests are admitted on the
// in-memory ledger alone and their spend joins the batched flush
// (spend_store.go), which a crash loses; each is counted by
// Observer.SpendUndurable. Holds whose write failed are retried with
// every flush until written.

// HoldTimeoutDefault is how long a budgeted request waits for its hold to
// reach the store before it is sent without one.
const HoldTimeoutDefault = time.Second

// SpendHoldLease is how long the holds of a process outlive its last
// write: the loop renews them every SpendFlushEvery, and a process sharing
// the store charges another's holds once their lease has ended (with one
// gateway on the store, a start charges every hold it finds at once).
const SpendHoldLease = 6 * SpendFlushEvery

// spendJournal is the spender's holds in the store. Its queues are
// guarded by spender.mu; the store is written by the loop alone, under
// spender.io.
type spendJournal struct {
	owner   string // this process: a new id per start
	timeout time.Duration
	kick    chan struct{} // something to write (buffered: one wake-up covers many)

	seq      int64
	opens    []jobstore.SpendHold
	settles  []queuedSettle
	next     *holdWrite // the write the queued opens go in
	degraded bool       // the last write failed or was too slow; logged once
}

// queuedSettle is a settlement not written yet, with what a rebase
// (spender.sync) must count of it.
type queuedSettle struct {
	jobstore.SpendSettlement
	label spendLabel
}

// holdWrite is one group commit, as the requests whose holds it opens
// wait for it.
type holdWrite struct {
	done chan struct{}
	err  error // set before done is closed
}

func newHoldWrite() *holdWrite { return &holdWrite{done: make(chan struct{})} }

func newSpendJournal(timeout time.Duration) *spendJournal {
	return &spendJournal{owner: newSpendOwner(), timeout: timeout, kick: make(chan struct{}, 1), next: newHoldWrite()}
}

// newSpendOwner names this process in the store: host and pid for
// people, and a random part, as a pid is reused.
func newSpendOwner() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

func (j *spendJournal) wake() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// persist writes h's worst case to the store before its request is sent,
// when its client has a budget and the spend is kept in a store. It
// returns when the hold is written, or after the journal's timeout (or at
// once while degraded) with the request to be sent without it; an error
// only when ctx ends first (the caller refunds h, which deletes the hold
// if it was written).
func (sp *spender) persist(ctx context.Context, h *spendHold) error {
	if h == nil || !sp.hasBudget(h.label.client) {
		return nil
	}
	sp.mu.Lock()
	j := sp.journal
	if j == nil {
		sp.mu.Unlock()
		return nil // spend kept in memory only
	}
	if j.degraded {
		sp.mu.Unlock()
		sp.obs.SpendUndurable(h.label.client)
		return nil
	}
	j.seq++
	h.seq = j.seq
	j.opens = append(j.opens, jobstore.SpendHold{Seq: h.seq, Client: h.label.client, Upstream: h.label.upstream,
		Model: h.label.model, Nanos: int64(h.hold.Amount())})
	w := j.next
	sp.mu.Unlock()
	j.wake()

	t := sp.clock.NewTimer(j.timeout)
	defer t.Stop()
	select {
	case <-w.done:
		if w.err == nil {
			return nil
		}
	case <-t.C():
		sp.degrade(j, fmt.Errorf("no answer in %s", j.timeout))
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	sp.obs.SpendUndurable(h.label.client)
	return nil
}

// settleHold queues h's settlement at cost (sp.mu held): h's hold was
// queued for the store.
func (j *spendJournal) settleHold(h *spendHold, cost pricing.Amount, now time.Time) {
	j.settles = append(j.settles, queuedSettle{label: h.label,
		SpendSettlement: jobstore.SpendSettlement{Seq: h.seq, Nanos: int64(cost), Day: quota.DayStart(now)}})
}

// degrade marks the journal degraded: requests are admitted without
// waiting for the store until a write succeeds.
func (sp *spender) degrade(j *spendJournal, err error) {
	sp.mu.Lock()
	first := !j.degraded
	j.degraded = true
	sp.mu.Unlock()
	if first {
		sp.log.Warn("spend holds not written to the store: budgeted requests are admitted on this process's memory until it answers (a crash meanwhile loses their spend)",
			"err", err)
	}
}

// writeHolds writes the queued opens and settlements in one store write,
// renewing the lease of this process's holds when renew is set. On
// failure they stay queued, ahead of what came meanwhile. sp.io is held.
func (sp *spender) writeHolds(ctx context.Context, st SpendStore, renew bool) error {
	sp.mu.Lock()
	j := sp.journal
	if j == nil {
		sp.mu.Unlock()
		return nil
	}
	opens, settles, w := j.opens, j.settles, j.next
	j.opens, j.settles, j.next = nil, nil, newHoldWrite()
	sp.mu.Unlock()
	if len(opens) == 0 && len(settles) == 0 && !renew {
		close(w.done)
		return nil
	}
	now := sp.clock.Now()
	p := jobstore.WriteSpendHoldsParams{Owner: j.owner, Open: opens, Renew: renew,
		LeaseUntil: now.Add(SpendHoldLease), Now: now}
	for _, s := range settles {
		p.Settle = append(p.Settle, s.SpendSettlement)
	}
	err := st.WriteSpendHolds(ctx, p)
	w.err = err
	close(w.done)
	if err != nil {
		sp.mu.Lock()
		j.opens = append(opens, j.opens...)
		j.settles = append(settles, j.settles...)
		sp.mu.Unlock()
		sp.degrade(j, err)
		return fmt.Errorf("writing spend holds: %w", err)
	}
	written := map[string]pricing.Amount{}
	for _, s := range settles {
		written[s.label.client] += pricing.Amount(s.Nanos)
	}
	sp.mu.Lock()
	recovered := j.degraded
	j.degraded = false
	for c, n := range written {
		sp.ledger.Written(c, n, now) // for a budget shared by a cluster (budget_share.go)
	}
	sp.mu.Unlock()
	if recovered {
		sp.log.Info("spend holds written to the store again: budgeted requests wait for their hold again")
	}
	return nil
}

// reap charges the holds of dead processes at their worst case (all but
// this process's when the store is not shared: every other owner is a
// process that ended) and reports them.
func (sp *spender) reap(ctx context.Context, st SpendStore, j *spendJournal, all bool) error {
	charged, err := st.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: j.owner, All: all, Now: sp.clock.Now()})
	if err != nil {
		return fmt.Errorf("charging the spend holds of ended processes: %w", err)
	}
	by := map[string]*spendDelta{}
	for _, e := range charged {
		d := by[e.Client]
		if d == nil {
			d = &spendDelta{}
			by[e.Client] = d
		}
		d.nanos += pricing.Amount(e.Nanos)
		d.requests += e.Requests
	}
	for c, d := range by {
		sp.obs.SpendOrphaned(c, d.nanos.Dollars())
		sp.log.Warn("charged the requests a process left in flight when it ended (a crash) at their worst case: the provider may have billed them",
			"client", c, "requests", d.requests, "usd", d.nanos.Dollars())
	}
	return nil
}

// heldElsewhere sums, per client, the holds open in the store of other
// processes.
func heldElsewhere(holds []jobstore.SpendHold, owner string) map[string]pricing.Amount {
	out := map[string]pricing.Amount{}
	for _, h := range holds {
		if h.Owner != owner {
			out[h.Client] += pricing.Amount(h.Nanos)
		}
	}
	return out
}
