package admit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// crashStore is a job store a test can take away from its process: once
// down, every spend call fails, as for a process that died (nothing it
// does reaches the store any more) or a store that is unreachable. While
// slow, hold writes hang until released or their context ends.
type crashStore struct {
	jobstore.Store
	down       atomic.Bool
	slow       chan struct{} // non-nil: hold writes wait for it to close
	holdWrites atomic.Int64  // hold writes that reached the store
}

var errDown = fmt.Errorf("%w: the test took the store away", jobstore.ErrUnavailable)

func (c *crashStore) WriteSpendHolds(ctx context.Context, p jobstore.WriteSpendHoldsParams) error {
	if c.slow != nil {
		select {
		case <-c.slow:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.down.Load() {
		return errDown
	}
	c.holdWrites.Add(1)
	return c.Store.WriteSpendHolds(ctx, p)
}

func (c *crashStore) AddSpend(ctx context.Context, p jobstore.AddSpendParams) error {
	if c.down.Load() {
		return errDown
	}
	return c.Store.AddSpend(ctx, p)
}

func (c *crashStore) ReapSpendHolds(ctx context.Context, p jobstore.ReapSpendHoldsParams) ([]jobstore.SpendEntry, error) {
	if c.down.Load() {
		return nil, errDown
	}
	return c.Store.ReapSpendHolds(ctx, p)
}

func (c *crashStore) SpendHolds(ctx context.Context, p jobstore.SpendHoldsParams) ([]jobstore.SpendHold, error) {
	if c.down.Load() {
		return nil, errDown
	}
	return c.Store.SpendHolds(ctx, p)
}

func (c *crashStore) Spend(ctx context.Context, p jobstore.SpendParams) ([]jobstore.SpendEntry, error) {
	if c.down.Load() {
		return nil, errDown
	}
	return c.Store.Spend(ctx, p)
}

// openStore opens a handle on the SQLite file at dsn, closed with the
// test.
func openStore(t *testing.T, dsn string) *crashStore {
	t.Helper()
	st, err := jobstore.Open(context.Background(), dsn, jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return &crashStore{Store: st}
}

// spendObserver counts the journal's events.
type spendObserver struct {
	admit.NopObserver
	mu        sync.Mutex
	orphaned  map[string]float64
	undurable int
}

func (o *spendObserver) SpendOrphaned(client string, usd float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.orphaned == nil {
		o.orphaned = map[string]float64{}
	}
	o.orphaned[client] += usd
}

func (o *spendObserver) SpendUndurable(string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.undurable++
}

func (o *spendObserver) counts() (map[string]float64, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]float64{}
	for c, v := range o.orphaned {
		out[c] = v
	}
	return out, o.undurable
}

// streamEngine answers every request with a stream its test ends (an
// io.Pipe): a request in flight until then.
type streamEngine struct {
	mu      sync.Mutex
	writers []*io.PipeWriter
}

func (e *streamEngine) Do(context.Context, *dispatch.Request) (*dispatch.Response, error) {
	r, w := io.Pipe()
	e.mu.Lock()
	e.writers = append(e.writers, w)
	e.mu.Unlock()
	return &dispatch.Response{Response: &http.Response{StatusCode: 200, Body: r, Header: http.Header{}}, Attempts: 1, Upstream: "main"}, nil
}

func (e *streamEngine) Unavailable() bool { return false }

// budgetPrices price claude-x at $10 and $100 per million tokens.
var budgetPrices = pricing.Config{Models: map[string]pricing.Price{"claude-x": {Input: 10, Output: 100}}}

// budgetLayer is a started Layer for client "team" with budget b, on
// the spend store st.
func budgetLayer(t *testing.T, fc *clock.Fake, st admit.SpendStore, b admit.Budget, shared bool, obs admit.Observer) *admit.Layer {
	t.Helper()
	l, err := admit.New(admit.Config{Clients: []admit.Client{{Name: "team", Budget: b}}, Prices: budgetPrices,
		Upstreams: []upstream.Config{{Name: "main", Protocol: llm.Anthropic}}, SharedSpend: shared, Clock: fc, Observer: obs})
	require.NoError(t, err)
	l.Bind(map[string]admit.Engine{"main": &streamEngine{}})
	require.NoError(t, l.Start(context.Background(), st))
	return l
}

// call is a job's call of up to 1,000 output tokens (worst case $0.101
// with its 100 input tokens); done is what it costs when it ends with
// 500 ($0.051).
func call() *dispatch.Request {
	return &dispatch.Request{Method: http.MethodPost, Path: "/v1/messages", Client: "team", Priority: llm.High,
		Body: []byte(`{"model":"claude-x","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`),
		Cost: provider.Cost{Model: "claude-x", InputTokens: 100, OutputTokens: 1000}}
}

var done = dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}, HasUsage: true, Usage: llm.Usage{InputTokens: 100, OutputTokens: 500}}

const (
	callWorst = 0.101
	callCost  = 0.051
)

// TestCrashChargesTheRequestsInFlight: a gateway dies (its store is taken
// away, nothing flushed) with budgeted calls in flight (three jobs' calls
// and a live stream) and settled calls whose spend the batched flush had
// not written yet. The next start on the same store charges every call in
// flight at its worst case and keeps the settled spend, so the restarted
// budget counts at least what the provider can have billed, and the
// provider's whole bill, however the calls in flight ended, stays within
// one call's worst case of the budget.
func TestCrashChargesTheRequestsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const budget = 1.0
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "spend.db")
	fc := clock.NewFake(t0)
	stA := openStore(t, dsn)
	a := budgetLayer(t, fc, stA, admit.Budget{Day: budget}, false, nil)
	t.Cleanup(func() { _ = a.Stop(ctx) }) // its store is gone by then
	target := mustRoute(t, a, "main")

	var billed float64 // what the provider bills, in US dollars
	for range 5 {
		adm, err := a.AdmitNow(target, call())
		require.NoError(t, err)
		require.InDelta(t, callWorst, adm.(*admit.Admission).Reserved(), 1e-9)
		require.InDelta(t, callCost, adm.Settle(done, true), 1e-9)
		billed += callCost
	}
	var inFlight []admit.Settler
	for range 3 {
		adm, err := a.AdmitNow(target, call())
		require.NoError(t, err)
		inFlight = append(inFlight, adm)
	}
	live, err := a.Do(ctx, "main", call(), true, nil)
	require.NoError(t, err)
	require.InDelta(t, 5*callCost, a.Account("team", fc.Now()).Day.Spent.Dollars(), 1e-9)
	require.InDelta(t, 4*callWorst, a.Account("team", fc.Now()).Day.Reserved.Dollars(), 1e-9)

	// The crash. The calls in flight go on at the provider, which bills
	// them whatever the gateway can no longer record: at worst, their
	// whole worst case.
	stA.down.Store(true)
	for _, adm := range inFlight {
		adm.Settle(dispatch.End{Outcome: llm.Outcome{Kind: llm.Success}}, true)
		billed += callWorst
	}
	require.NoError(t, live.Body.Close())
	billed += callWorst

	// The restart on the same store.
	obs := &spendObserver{}
	b := budgetLayer(t, fc, openStore(t, dsn), admit.Budget{Day: budget}, false, obs)
	t.Cleanup(func() { require.NoError(t, b.Stop(ctx)) })
	restored := b.Account("team", fc.Now()).Day
	require.GreaterOrEqual(t, restored.Spent.Dollars(), billed-1e-9, "the restarted budget counts what the provider can have billed")
	require.Zero(t, restored.Reserved)
	orphaned, _ := obs.counts()
	require.GreaterOrEqual(t, orphaned["team"], 4*callWorst-1e-9, "the four calls in flight are charged at their worst case")

	// Traffic goes on until the budget refuses it.
	refused := false
	for range 20 {
		adm, err := b.AdmitNow(mustRoute(t, b, "main"), call())
		if err != nil {
			var r *admit.RefusalError
			require.ErrorAs(t, err, &r)
			refused = true
			break
		}
		billed += adm.Settle(done, true)
	}
	require.True(t, refused, "the budget refuses once spent")
	t.Logf("budget $%.2f: the provider billed $%.3f (%+.1f %%), one worst case is $%.3f", budget, billed,
		100*(billed-budget)/budget, callWorst)
	require.LessOrEqual(t, billed, budget+callWorst, "over-spent by at most one call's worst case")
}

// TestUnreachableStoreNeverHoldsRequests: a budgeted call waits for its
// hold only while the store answers. A store that fails, or does not
// answer within the hold timeout, degrades the journal: the call is sent
// all the same (counted undurable) and the next ones do not wait at all;
// the next flush that reaches the store writes the holds left over and
// ends it, and the spend of every call is in the store once all settle.
func TestUnreachableStoreNeverHoldsRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "spend.db")
	fc := clock.NewFake(t0)
	st := openStore(t, dsn)
	obs := &spendObserver{}
	l := budgetLayer(t, fc, st, admit.Budget{Day: 10}, false, obs)
	target := mustRoute(t, l, "main")
	var adms []admit.Settler
	admitOne := func() {
		adm, err := l.AdmitNow(target, call())
		require.NoError(t, err)
		adms = append(adms, adm)
	}

	admitOne() // the store answers: durable
	require.EqualValues(t, 1, st.holdWrites.Load())
	st.down.Store(true)
	admitOne() // its write fails: sent without
	admitOne() // degraded: not even tried
	_, undurable := obs.counts()
	require.Equal(t, 2, undurable)
	require.EqualValues(t, 1, st.holdWrites.Load())

	st.down.Store(false)
	require.NoError(t, l.Flush(ctx)) // the second call's hold, and the journal is back
	admitOne()
	_, undurable = obs.counts()
	require.Equal(t, 2, undurable, "waited for its hold again")
	holds, err := st.Store.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Len(t, holds, 3, "every call but the one admitted while degraded")

	// A store that does not answer: the call waits the hold timeout on the
	// clock, then goes.
	st.slow = make(chan struct{})
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		admitOne()
	}()
	require.True(t, fc.WaitForTimers(2, 5*time.Second), "the flush's timer and the call's")
	fc.Advance(admit.HoldTimeoutDefault)
	<-sent
	_, undurable = obs.counts()
	require.Equal(t, 3, undurable)
	close(st.slow)

	for _, adm := range adms {
		adm.Settle(done, true)
	}
	require.NoError(t, l.Stop(ctx))
	holds, err = st.Store.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Empty(t, holds)
	rows, err := st.Store.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	var spent int64
	for _, r := range rows {
		spent += r.Nanos
	}
	require.Equal(t, 5*int64(pricing.FromDollars(callCost)), spent, "the spend of every call, held or not")
}

// TestSharedStoreChargesOnlyDeadProcesses: on a store shared by two
// gateways, each counts the other's calls in flight as held, never
// charges them while the other renews its lease, and charges them at
// their worst case once the other is gone and its lease has ended.
func TestSharedStoreChargesOnlyDeadProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "spend.db")
	fc := clock.NewFake(t0)
	stA := openStore(t, dsn)
	a := budgetLayer(t, fc, stA, admit.Budget{Day: 1}, true, nil)
	t.Cleanup(func() { _ = a.Stop(ctx) })
	obs := &spendObserver{}
	b := budgetLayer(t, fc, openStore(t, dsn), admit.Budget{Day: 1}, true, obs)
	t.Cleanup(func() { require.NoError(t, b.Stop(ctx)) })

	for range 2 {
		_, err := a.AdmitNow(mustRoute(t, a, "main"), call())
		require.NoError(t, err)
	}
	require.NoError(t, b.Flush(ctx))
	require.InDelta(t, 2*callWorst, b.Account("team", fc.Now()).Day.Reserved.Dollars(), 1e-9, "a's calls in flight, held")
	require.Zero(t, b.Account("team", fc.Now()).Day.Spent)

	// a renews its lease past the first one's end: b leaves its holds.
	for range 3 {
		fc.Advance(admit.SpendHoldLease / 2)
		require.NoError(t, a.Flush(ctx))
		require.NoError(t, b.Flush(ctx))
	}
	orphaned, _ := obs.counts()
	require.Empty(t, orphaned, "a live peer's calls are never charged")
	require.InDelta(t, 2*callWorst, b.Account("team", fc.Now()).Day.Reserved.Dollars(), 1e-9)

	// a dies; once its lease has ended, b charges its calls.
	stA.down.Store(true)
	fc.Advance(admit.SpendHoldLease + admit.SpendFlushEvery)
	require.NoError(t, b.Flush(ctx))
	orphaned, _ = obs.counts()
	require.InDelta(t, 2*callWorst, orphaned["team"], 1e-9)
	acc := b.Account("team", fc.Now()).Day
	require.InDelta(t, 2*callWorst, acc.Spent.Dollars(), 1e-9)
	require.Zero(t, acc.Reserved)
}
