package lifecycle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStopWaitsForTheGoroutinesWithTheStopCause: the run context outlives
// Start's context, Stop runs the service's steps before canceling it with
// ErrStop, and returns once the goroutines have.
func TestStopWaitsForTheGoroutinesWithTheStopCause(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	startCtx, cancelStart := context.WithCancel(context.Background())
	cause := make(chan error, 1)
	var steps []string
	require.NoError(t, b.Start(startCtx, func(run context.Context) error {
		require.True(t, b.Go(func() {
			<-run.Done()
			steps = append(steps, "goroutine")
			cause <- context.Cause(run)
		}))
		return nil
	}))
	cancelStart()
	require.NoError(t, b.Stop(context.Background(), func(context.Context) error {
		steps = append(steps, "stop steps")
		return nil
	}))
	require.ErrorIs(t, <-cause, lifecycle.ErrStop, "a deliberate stop, not the start context's cancel")
	require.Equal(t, []string{"stop steps", "goroutine"}, steps)
	require.False(t, b.Go(func() {}), "no goroutine once halted")
}

// TestStopGivesUpWithItsContext: a goroutine that does not return holds
// Stop only until Stop's context ends; a later Stop waits again.
func TestStopGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	release := make(chan struct{})
	require.NoError(t, b.Start(context.Background(), func(context.Context) error {
		b.Go(func() { <-release })
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.Stop(ctx, nil), context.Canceled)
	require.ErrorIs(t, b.Stop(ctx, nil), context.Canceled, "still running")
	close(release)
	require.NoError(t, b.Stop(context.Background(), nil))
}

// TestFailedStartLeavesTheServiceStopped: what a failed start launched is
// canceled and waited for; the service cannot be started again.
func TestFailedStartLeavesTheServiceStopped(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	boom := errors.New("boom")
	ended := false
	err := b.Start(context.Background(), func(run context.Context) error {
		b.Go(func() { <-run.Done(); ended = true })
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.True(t, ended)
	require.ErrorIs(t, b.Start(context.Background(), func(context.Context) error { return nil }), lifecycle.ErrStopped)
	require.NoError(t, b.Stop(context.Background(), func(context.Context) error {
		t.Fatal("no stop steps for a service that did not start")
		return nil
	}))
}
