package jobstore

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGroupCommitParallelMin checks the dispatcher's rule: a flush starts
// at once when none runs; beside a running one, another starts only when
// parallelMin calls wait, and then takes them all in one batch.
func TestGroupCommitParallelMin(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	entered := make(chan []int, 4)
	flush := func(_ context.Context, items []int) ([]int, []error) {
		entered <- items
		if items[0] == 1 {
			<-gate // the first flush stays running
		}
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 10
		}
		return out, make([]error, len(items))
	}
	g := newGroupCommit(4, 512, 3, flush)
	defer g.close()
	var wg sync.WaitGroup
	results := make([]int, 5)
	call := func(v int) {
		wg.Go(func() {
			r, err := g.do(context.Background(), v)
			require.NoError(t, err)
			results[v] = r
		})
	}
	call(1)
	require.Equal(t, []int{1}, <-entered, "a lone call is flushed at once")
	for v := 2; v <= 4; v++ {
		call(v)
	}
	second := <-entered
	require.ElementsMatch(t, []int{2, 3, 4}, second, "beside a running flush, the next waits for parallelMin calls and takes them all")
	close(gate)
	wg.Wait()
	require.Equal(t, []int{0, 10, 20, 30, 40}, results)
}

func TestGroupCommitClosed(t *testing.T) {
	t.Parallel()
	g := newGroupCommit(1, 8, 1, func(_ context.Context, items []int) ([]int, []error) {
		return make([]int, len(items)), make([]error, len(items))
	})
	_, err := g.do(context.Background(), 1)
	require.NoError(t, err)
	g.close()
	g.close() // idempotent
	_, err = g.do(context.Background(), 2)
	require.True(t, errors.Is(err, ErrClosed), "got %v", err)
}
