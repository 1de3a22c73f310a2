package jobstoretest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// testSpendHolds: holds are opened idempotently and read back in order;
// a settlement deletes its hold and adds its cost once (a retried or late
// settlement adds nothing); a reap charges the holds of owners whose
// lease ended (or of every other owner), never the caller's or a renewed
// one's; concurrent reapers charge each hold once.
func testSpendHolds(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	got, err := s.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Empty(t, got)

	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	hold := func(seq int64, client string, nanos int64) jobstore.SpendHold {
		return jobstore.SpendHold{Seq: seq, Client: client, Upstream: "u", Model: "m", Nanos: nanos}
	}
	open := func(owner string, lease time.Duration, hs ...jobstore.SpendHold) {
		t.Helper()
		require.NoError(t, s.WriteSpendHolds(ctx, jobstore.WriteSpendHoldsParams{Owner: owner, Open: hs,
			LeaseUntil: T0.Add(lease), Now: T0}))
	}
	spend := func() map[string]jobstore.SpendEntry {
		t.Helper()
		rows, err := s.Spend(ctx, jobstore.SpendParams{})
		require.NoError(t, err)
		out := map[string]jobstore.SpendEntry{}
		for _, r := range rows {
			out[r.Client] = r
		}
		return out
	}
	open("a", 30*time.Second, hold(1, "c1", 100), hold(2, "c1", 200), hold(3, "c1", 300))
	open("b", 10*time.Second, hold(1, "c2", 50))
	open("a", 30*time.Second, hold(1, "c1", 999)) // a retried write: left as it is
	got, err = s.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, jobstore.SpendHold{Owner: "a", Seq: 1, Client: "c1", Upstream: "u", Model: "m", Nanos: 100,
		LeaseUntil: T0.Add(30 * time.Second), CreatedAt: T0}, got[0])
	require.Equal(t, []string{"a", "a", "a", "b"}, []string{got[0].Owner, got[1].Owner, got[2].Owner, got[3].Owner})

	// Settle a1 at 40 and refund a2; the same settlements again (an
	// answer lost) add nothing.
	settle := jobstore.WriteSpendHoldsParams{Owner: "a", Now: T0, Settle: []jobstore.SpendSettlement{
		{Seq: 1, Nanos: 40, Day: T0}, {Seq: 2, Nanos: 0, Day: T0}}}
	require.NoError(t, s.WriteSpendHolds(ctx, settle))
	require.NoError(t, s.WriteSpendHolds(ctx, settle))
	require.Equal(t, jobstore.SpendEntry{Client: "c1", Upstream: "u", Model: "m", Day: march, Nanos: 40, Requests: 1}, spend()["c1"])
	got, err = s.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Len(t, got, 2)

	// At T0+20s b's lease has ended: b1 is charged its worst case, once;
	// a's holds are the caller's.
	reaped, err := s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: "a", Now: T0.Add(20 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []jobstore.SpendEntry{{Client: "c2", Upstream: "u", Model: "m", Day: march, Nanos: 50, Requests: 1}}, reaped)
	reaped, err = s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: "a", Now: T0.Add(20 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, reaped)
	require.Equal(t, int64(50), spend()["c2"].Nanos)

	// a renews its lease: another process's reap leaves a3 alone until
	// the lease ends, unless it reaps all.
	require.NoError(t, s.WriteSpendHolds(ctx, jobstore.WriteSpendHoldsParams{Owner: "a", Renew: true,
		LeaseUntil: T0.Add(time.Minute), Now: T0.Add(25 * time.Second)}))
	reaped, err = s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: "x", Now: T0.Add(40 * time.Second)})
	require.NoError(t, err)
	require.Empty(t, reaped)
	reaped, err = s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: "x", All: true, Now: T0.Add(40 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, []jobstore.SpendEntry{{Client: "c1", Upstream: "u", Model: "m", Day: march, Nanos: 300, Requests: 1}}, reaped)
	// a settles a3 after it was reaped: charged already, nothing added.
	require.NoError(t, s.WriteSpendHolds(ctx, jobstore.WriteSpendHoldsParams{Owner: "a", Now: T0,
		Settle: []jobstore.SpendSettlement{{Seq: 3, Nanos: 7, Day: T0}}}))
	require.Equal(t, jobstore.SpendEntry{Client: "c1", Upstream: "u", Model: "m", Day: march, Nanos: 340, Requests: 2}, spend()["c1"])

	for _, bad := range []jobstore.WriteSpendHoldsParams{
		{Now: T0},
		{Owner: "a"},
		{Owner: "a", Now: T0, Open: []jobstore.SpendHold{hold(9, "c1", 1)}}, // no lease
		{Owner: "a", Now: T0, LeaseUntil: T0, Open: []jobstore.SpendHold{hold(9, "c1", -1)}},
		{Owner: "a", Now: T0, LeaseUntil: T0, Open: []jobstore.SpendHold{hold(9, "", 1)}},
		{Owner: "a", Now: T0, Settle: []jobstore.SpendSettlement{{Seq: 9, Nanos: -1, Day: T0}}},
		{Owner: "a", Now: T0, Settle: []jobstore.SpendSettlement{{Seq: 9, Nanos: 1}}},
	} {
		require.ErrorIs(t, s.WriteSpendHolds(ctx, bad), jobstore.ErrInvalid, "%+v", bad)
	}
	_, err = s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: "a"})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	// Four reapers at once charge a dead owner's 20 holds once each.
	var hs []jobstore.SpendHold
	for i := range 20 {
		hs = append(hs, hold(int64(i+1), "c3", 10))
	}
	open("d", time.Second, hs...)
	var mu sync.Mutex
	var charged int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			r, err := s.ReapSpendHolds(ctx, jobstore.ReapSpendHoldsParams{Except: string(rune('p' + i)), Now: T0.Add(time.Minute)})
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			for _, e := range r {
				charged += e.Nanos
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(200), charged)
	require.Equal(t, jobstore.SpendEntry{Client: "c3", Upstream: "u", Model: "m", Day: march, Nanos: 200, Requests: 20}, spend()["c3"])
	got, err = s.SpendHolds(ctx, jobstore.SpendHoldsParams{})
	require.NoError(t, err)
	require.Empty(t, got)
}
