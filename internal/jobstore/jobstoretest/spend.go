package jobstoretest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// testSpend: AddSpend adds (never overwrites) per client, day, upstream
// and model; Spend reads them back in order, from a day on; concurrent
// adders lose nothing.
func testSpend(t *testing.T, s jobstore.Store) {
	ctx := context.Background()
	got, err := s.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	require.Empty(t, got)

	day1 := time.Date(2026, 2, 28, 0, 0, 0, 0, time.UTC)
	day2 := T0 // 2026-03-01 12:00: its day is 2026-03-01
	require.NoError(t, s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0, Entries: []jobstore.SpendEntry{
		{Client: "a", Upstream: "anthropic", Model: "claude-sonnet-4-5", Day: day1, Nanos: 100, Requests: 1},
		{Client: "a", Upstream: "anthropic", Model: "claude-sonnet-4-5", Day: day2, Nanos: 5, Requests: 1},
		{Client: "b", Upstream: "openai", Model: "gpt-4o", Day: day2, Nanos: 7, Requests: 2},
	}}))
	require.NoError(t, s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0, Entries: []jobstore.SpendEntry{
		{Client: "a", Upstream: "anthropic", Model: "claude-sonnet-4-5", Day: day2.Add(time.Hour), Nanos: 10, Requests: 3},
	}}))
	require.NoError(t, s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0})) // nothing to add

	got, err = s.Spend(ctx, jobstore.SpendParams{})
	require.NoError(t, err)
	march := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	require.Equal(t, []jobstore.SpendEntry{
		{Client: "a", Upstream: "anthropic", Model: "claude-sonnet-4-5", Day: day1, Nanos: 100, Requests: 1},
		{Client: "a", Upstream: "anthropic", Model: "claude-sonnet-4-5", Day: march, Nanos: 15, Requests: 4},
		{Client: "b", Upstream: "openai", Model: "gpt-4o", Day: march, Nanos: 7, Requests: 2},
	}, got)
	got, err = s.Spend(ctx, jobstore.SpendParams{Since: T0})
	require.NoError(t, err)
	require.Len(t, got, 2)

	err = s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0, Entries: []jobstore.SpendEntry{{Client: "a", Day: day1, Nanos: -1}}})
	require.ErrorIs(t, err, jobstore.ErrInvalid)
	err = s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0, Entries: []jobstore.SpendEntry{{Day: day1}}})
	require.ErrorIs(t, err, jobstore.ErrInvalid)

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				require.NoError(t, s.AddSpend(ctx, jobstore.AddSpendParams{Now: T0, Entries: []jobstore.SpendEntry{
					{Client: "c", Upstream: "u", Model: "m", Day: day2, Nanos: 3, Requests: 1},
				}}))
			}
		})
	}
	wg.Wait()
	got, err = s.Spend(ctx, jobstore.SpendParams{Since: T0})
	require.NoError(t, err)
	require.Equal(t, jobstore.SpendEntry{Client: "c", Upstream: "u", Model: "m", Day: march, Nanos: 240, Requests: 80}, got[len(got)-1])
}
