package admit

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// TestStartAfterStopLeavesNoSpender: a spend store that connects in the
// background after the gateway stopped starts nothing that outlives the
// layer (goleak in TestMain catches a spender loop left running).
func TestStartAfterStopLeavesNoSpender(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := New(Config{Clients: []Client{{Name: "team", Budget: Budget{Day: 100}}}, Prices: spendPrices,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	l.AwaitSpendStore()
	require.NoError(t, l.Stop(ctx))
	st, err := jobstore.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "s.db"), jobstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	require.ErrorIs(t, l.Start(ctx, st), lifecycle.ErrStopped)
	require.False(t, l.spend.flusher.Go(func() {}), "the spender is halted")
}
