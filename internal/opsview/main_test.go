package opsview

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/dispatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fakeEngine is an engine whose state the test sets.
type fakeEngine struct {
	snap dispatch.Snapshot
	x    dispatch.Explain
	keys []dispatch.KeyState
}

func (f *fakeEngine) Snapshot() dispatch.Snapshot { return f.snap }
func (f *fakeEngine) Explain() dispatch.Explain   { return f.x }
func (f *fakeEngine) Keys() []dispatch.KeyState   { return f.keys }

var _ Engine = (*fakeEngine)(nil)

func requireSeries(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		require.Contains(t, body, w+"\n", "series %s", w)
	}
}
