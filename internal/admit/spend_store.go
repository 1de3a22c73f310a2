package admit

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// The spend's persistence: loaded at start, flushed in batches, and, when
// the store is shared with other gateways, read back after each flush.

// SpendStore is where the spend is kept; jobstore.Store implements it.
type SpendStore interface {
	AddSpend(ctx context.Context, p jobstore.AddSpendParams) error
	Spend(ctx context.Context, p jobstore.SpendParams) ([]jobstore.SpendEntry, error)
}

// start loads the spend kept in st (nil: none) into the budgets and
// flushes to it every SpendFlushEvery until close (lifecycle.Base: once).
func (sp *spender) start(ctx context.Context, st SpendStore) error {
	if st == nil {
		return nil
	}
	return sp.flusher.Start(ctx, func(run context.Context) error {
		rows, err := st.Spend(ctx, jobstore.SpendParams{})
		if err != nil {
			return fmt.Errorf("reading the spend kept in the store: %w", err)
		}
		now := sp.clock.Now()
		sp.mu.Lock()
		for _, r := range rows {
			sp.ledger.Load(r.Client, r.Day, pricing.Amount(r.Nanos), now)
			sp.addTotal(spendLabel{client: r.Client, upstream: r.Upstream, model: r.Model}, pricing.Amount(r.Nanos), r.Requests)
		}
		sp.store = st
		sp.mu.Unlock()
		sp.flusher.Go(func() { sp.loop(run) })
		return nil
	})
}

func (sp *spender) loop(run context.Context) {
	t := sp.clock.NewTimer(SpendFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-run.Done():
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(run), SpendFlushEvery)
		_ = sp.flush(ctx)
		cancel()
		t.Reset(SpendFlushEvery)
	}
}

// flush writes the pending spend in one AddSpend; on failure it stays
// pending (merged with what comes next) for the next flush.
func (sp *spender) flush(ctx context.Context) error {
	sp.mu.Lock()
	st := sp.store
	if st == nil || len(sp.pending) == 0 {
		shared := sp.shared
		sp.mu.Unlock()
		if st != nil && shared {
			return sp.sync(ctx, st) // what the other gateways spent
		}
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
	if !sp.shared {
		return nil
	}
	sp.mu.Unlock()
	err = sp.sync(ctx, st)
	sp.mu.Lock()
	return err
}

// sync rebases every client's windows on the store's sums (what every
// gateway sharing it has flushed) plus this gateway's pending spend.
func (sp *spender) sync(ctx context.Context, st SpendStore) error {
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
	for c, s := range by {
		sp.ledger.Rebase(c, s.day, s.month, s.total, now)
	}
	sp.totals = totals
	return nil
}

// close stops the flush loop and writes what is pending; the store stays
// open (its owner closes it after). It is idempotent and safe before
// start.
func (sp *spender) close(ctx context.Context) error {
	return sp.flusher.Stop(ctx, func(ctx context.Context) error {
		// A flush in progress ends on its own timeout: wait for it
		// whatever is left of ctx, then write what is pending.
		_ = sp.flusher.Halt(context.WithoutCancel(ctx))
		err := sp.flush(ctx)
		sp.mu.Lock()
		sp.store = nil
		sp.mu.Unlock()
		return err
	})
}
