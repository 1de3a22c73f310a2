package admit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// The spend's persistence: loaded at start, the holds of budgeted requests
// written as they come (spend_journal.go), the rest flushed in batches,
// and, when the store is shared with other gateways, read back after
// each flush.

// errSpendClosed answers a hold queued after the spender closed.
var errSpendClosed = errors.New("spend accounting stopped")

// SpendStore is where the spend is kept; jobstore.Store implements it.
type SpendStore interface {
	AddSpend(ctx context.Context, p jobstore.AddSpendParams) error
	Spend(ctx context.Context, p jobstore.SpendParams) ([]jobstore.SpendEntry, error)
	WriteSpendHolds(ctx context.Context, p jobstore.WriteSpendHoldsParams) error
	SpendHolds(ctx context.Context, p jobstore.SpendHoldsParams) ([]jobstore.SpendHold, error)
	ReapSpendHolds(ctx context.Context, p jobstore.ReapSpendHoldsParams) ([]jobstore.SpendEntry, error)
}

// start charges the holds dead processes left open in st (nil: none),
// loads the spend kept there into the budgets, and then writes the holds
// as they come and flushes every SpendFlushEvery until close
// (lifecycle.Base: once). The store is read before anything starts: a
// start that fails on the store leaves the spender as it was, and may be
// tried again.
func (sp *spender) start(ctx context.Context, st SpendStore) error {
	if st == nil {
		return nil
	}
	j := newSpendJournal(sp.holdTimeout)
	// With one gateway on the store, every hold in it is a dead
	// process's; on a shared one, those whose lease has ended, and the
	// others count as held until they settle or are charged.
	if err := sp.reap(ctx, st, j, !sp.shared); err != nil {
		return err
	}
	var held map[string]pricing.Amount
	if sp.shared {
		holds, err := st.SpendHolds(ctx, jobstore.SpendHoldsParams{})
		if err != nil {
			return fmt.Errorf("reading the spend holds kept in the store: %w", err)
		}
		held = heldElsewhere(holds, j.owner)
	}
	rows, err := st.Spend(ctx, jobstore.SpendParams{})
	if err != nil {
		return fmt.Errorf("reading the spend kept in the store: %w", err)
	}
	return sp.flusher.Start(ctx, func(run context.Context) error {
		now := sp.clock.Now()
		sp.mu.Lock()
		for _, r := range rows {
			sp.ledger.Load(r.Client, r.Day, pricing.Amount(r.Nanos), now)
			sp.addTotal(spendLabel{client: r.Client, upstream: r.Upstream, model: r.Model}, pricing.Amount(r.Nanos), r.Requests)
		}
		sp.ledger.SetHeld(held, now)
		sp.store, sp.journal = st, j
		sp.mu.Unlock()
		sp.awaiting.Store(false) // the spend is known: budgets are enforced
		sp.flusher.Go(func() { sp.loop(run, st, j) })
		return nil
	})
}

// loop writes the holds as they are queued (at once while a write is not
// in flight: a group commit), and flushes every SpendFlushEvery. While the
// journal is degraded its holds wait for the flush, so a store that does
// not answer is tried once a period, not once a request.
func (sp *spender) loop(run context.Context, st SpendStore, j *spendJournal) {
	t := sp.clock.NewTimer(SpendFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-run.Done():
			return
		case <-j.kick:
			sp.mu.Lock()
			degraded := j.degraded
			sp.mu.Unlock()
			if degraded {
				continue
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(run), SpendFlushEvery)
			sp.io.Lock()
			_ = sp.writeHolds(ctx, st, false)
			sp.io.Unlock()
			cancel()
		case <-t.C():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(run), SpendFlushEvery)
			_ = sp.flush(ctx)
			cancel()
			t.Reset(SpendFlushEvery)
		}
	}
}

// flush writes the queued holds (renewing this process's lease) and the
// pending spend in one AddSpend; what fails stays queued or pending for
// the next flush. When the store is shared it then charges the holds of
// dead processes and rebases the budgets on the store (sync).
func (sp *spender) flush(ctx context.Context) error {
	sp.io.Lock()
	defer sp.io.Unlock()
	sp.mu.Lock()
	st, j, shared := sp.store, sp.journal, sp.shared
	sp.mu.Unlock()
	if st == nil {
		return nil
	}
	errs := []error{sp.writeHolds(ctx, st, true), sp.flushPending(ctx, st)}
	if shared {
		errs = append(errs, sp.reap(ctx, st, j, false), sp.sync(ctx, st, j))
	}
	return errors.Join(errs...)
}

// flushPending writes the pending spend (clients without a budget, and
// requests admitted while the journal was degraded) in one AddSpend; on
// failure it stays pending, merged with what comes next.
func (sp *spender) flushPending(ctx context.Context, st SpendStore) error {
	sp.mu.Lock()
	if len(sp.pending) == 0 {
		sp.mu.Unlock()
		return nil
	}
	batch := sp.pending
	sp.pending = map[spendKey]*spendDelta{}
	sp.mu.Unlock()
	p := jobstore.AddSpendParams{Now: sp.clock.Now(), Entries: make([]jobstore.SpendEntry, 0, len(batch))}
	for k, d := range batch {
		p.Entries = append(p.Entries, jobstore.SpendEntry{Client: k.client, Upstream: k.upstream, Model: k.model,
			Day: k.day, Nanos: int64(d.nanos), Requests: d.requests})
	}
	err := st.AddSpend(ctx, p)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if err != nil {
		for k, d := range batch {
			if cur := sp.pending[k]; cur != nil {
				cur.nanos += d.nanos
				cur.requests += d.requests
			} else {
				sp.pending[k] = d
			}
		}
		if !sp.flushFail {
			sp.log.Warn("writing spend to the store; kept in memory and retried", "entries", len(batch), "err", err)
		}
		sp.flushFail = true
		return fmt.Errorf("writing spend: %w", err)
	}
	if sp.flushFail {
		sp.log.Info("spend written to the store again", "entries", len(batch))
	}
	written := map[string]pricing.Amount{}
	for k, d := range batch {
		written[k.client] += d.nanos
	}
	for c, n := range written {
		sp.ledger.Written(c, n, sp.clock.Now()) // for a budget shared by a cluster (budget_share.go)
	}
	sp.flushFail = false
	return nil
}

// sync rebases every client's windows on the store's sums (what every
// gateway sharing it has written) plus this gateway's spend not written
// yet (pending, and settlements queued), and sets what the other
// gateways hold in flight. sp.io is held, so no write of this gateway's
// is in flight: each of its settled costs is counted once, in the store
// or in its queues. The holds are read before the spend, so a peer's
// request that settles in between is counted twice (until the next sync),
// never missed.
func (sp *spender) sync(ctx context.Context, st SpendStore, j *spendJournal) error {
	holds, err := st.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	if err != nil {
		return fmt.Errorf("reading the shared spend holds: %w", err)
	}
	rows, err := st.Spend(ctx, jobstore.SpendParams{})
	if err != nil {
		return fmt.Errorf("reading the shared spend: %w", err)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	now := sp.clock.Now()
	day, month := quota.DayStart(now), quota.MonthStart(now)
	type sums struct{ day, month, total pricing.Amount }
	by := map[string]*sums{}
	totals := map[spendLabel]*spendDelta{}
	add := func(l spendLabel, d time.Time, nanos pricing.Amount, n int64) {
		s := by[l.client]
		if s == nil {
			s = &sums{}
			by[l.client] = s
		}
		s.total += nanos
		if !d.Before(month) {
			s.month += nanos
		}
		if d.Equal(day) {
			s.day += nanos
		}
		t := totals[l]
		if t == nil {
			t = &spendDelta{}
			totals[l] = t
		}
		t.nanos += nanos
		t.requests += n
	}
	for _, r := range rows {
		add(spendLabel{client: r.Client, upstream: r.Upstream, model: r.Model}, r.Day, pricing.Amount(r.Nanos), r.Requests)
	}
	for k, d := range sp.pending {
		add(k.spendLabel, k.day, d.nanos, d.requests)
	}
	for _, q := range j.settles {
		if q.Nanos > 0 {
			add(q.label, q.Day, pricing.Amount(q.Nanos), 1)
		}
	}
	for c, s := range by {
		sp.ledger.Rebase(c, s.day, s.month, s.total, now)
	}
	sp.ledger.SetHeld(heldElsewhere(holds, j.owner), now)
	sp.totals = totals
	return nil
}

// close stops the loop and writes what is queued and pending; the store
// stays open (its owner closes it after). A hold still open (a request
// that has not settled) stays in the store, to be charged at its worst
// case by the next start. It is idempotent and safe before start.
func (sp *spender) close(ctx context.Context) error {
	return sp.flusher.Stop(ctx, func(ctx context.Context) error {
		// A flush in progress ends on its own timeout: wait for it
		// whatever is left of ctx, then write what is pending.
		_ = sp.flusher.Halt(context.WithoutCancel(ctx))
		err := sp.flush(ctx)
		sp.mu.Lock()
		j := sp.journal
		sp.store, sp.journal = nil, nil
		sp.mu.Unlock()
		if j != nil {
			j.next.err = errSpendClosed
			close(j.next.done) // a hold queued since goes unwritten
		}
		return err
	})
}
