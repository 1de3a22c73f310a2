package jobstore

import (
	"context"
	"slices"
	"sync"
)

// groupCommit coalesces concurrent calls into batches handed to flush, one
// round trip and one commit per batch. A dispatcher goroutine collects the
// waiting items; it starts a flush at once when none is running, and while
// flushes are running it starts another (up to flushers at a time) only
// once at least parallelMin items wait. So a trickle of calls runs one
// statement at a time and every item that arrives meanwhile joins the next
// one (big batches, little per-statement cost), while a flood fills several
// statements at once. Alone, a call costs one statement as before.
type groupCommit[T, R any] struct {
	kick        chan struct{} // a call was queued (buffered: one wake-up covers many)
	done        chan struct{}
	wg          sync.WaitGroup
	once        sync.Once
	max         int
	flushers    int
	parallelMin int
	flush       func(ctx context.Context, items []T) ([]R, []error)

	// Calls queue here rather than on a channel: under a flood (a drain
	// completes a thousand jobs at once) every caller blocked in a select
	// on shared channels, and their locks cost CPU (BENCHMARKS.md,
	// "Tuning notes").
	mu     sync.Mutex
	queued []*gcItem[T, R]
	closed bool
}

type gcItem[T, R any] struct {
	ctx context.Context
	v   T
	res chan gcResult[R]
}

type gcResult[R any] struct {
	v   R
	err error
}

// newGroupCommit starts a group commit of at most max items per flush and
// at most flushers flushes at once; a second and later concurrent flush
// starts only when parallelMin items wait.
func newGroupCommit[T, R any](flushers, max, parallelMin int, flush func(ctx context.Context, items []T) ([]R, []error)) *groupCommit[T, R] {
	g := &groupCommit[T, R]{kick: make(chan struct{}, 1), done: make(chan struct{}), max: max,
		flushers: max1(flushers), parallelMin: max1(parallelMin), flush: flush}
	// The flushers are long-lived: a goroutine per flush started with a
	// small stack and copied it as it grew through the driver, every time.
	work := make(chan []*gcItem[T, R])
	finished := make(chan struct{}, g.flushers)
	for range g.flushers {
		g.wg.Go(func() {
			for batch := range work {
				g.run(batch)
				finished <- struct{}{}
			}
		})
	}
	g.wg.Go(func() {
		defer close(work)
		g.dispatch(work, finished)
	})
	return g
}

func max1(n int) int { return max(n, 1) }

// do submits v and waits for its batch to be flushed.
func (g *groupCommit[T, R]) do(ctx context.Context, v T) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, context.Cause(ctx)
	}
	it := &gcItem[T, R]{ctx: ctx, v: v, res: make(chan gcResult[R], 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return zero, ErrClosed
	}
	g.queued = append(g.queued, it)
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
	r := <-it.res
	return r.v, r.err
}

// take moves the queued calls to pending.
func (g *groupCommit[T, R]) take(pending []*gcItem[T, R]) []*gcItem[T, R] {
	g.mu.Lock()
	defer g.mu.Unlock()
	pending = append(pending, g.queued...)
	clear(g.queued)
	g.queued = g.queued[:0]
	return pending
}

// dispatch hands batches to the flushers on work (one is always free while
// fewer than g.flushers run) and counts them back on finished.
func (g *groupCommit[T, R]) dispatch(work chan<- []*gcItem[T, R], finished <-chan struct{}) {
	running := 0
	var pending []*gcItem[T, R]
	defer func() {
		for ; running > 0; running-- {
			<-finished
		}
	}()
	for {
		pending = g.take(pending)
		// Start flushes while the rule allows.
		for len(pending) > 0 && running < g.flushers && (running == 0 || len(pending) >= g.parallelMin) {
			n := min(len(pending), g.max)
			batch := slices.Clone(pending[:n])
			pending = append(pending[:0], pending[n:]...)
			running++
			work <- batch
		}
		// Wait for a call or a finished flush.
		select {
		case <-g.kick:
		case <-finished:
			running--
		case <-g.done:
			g.mu.Lock()
			g.closed = true
			g.mu.Unlock()
			for _, it := range g.take(pending) {
				it.res <- gcResult[R]{err: ErrClosed}
			}
			return
		}
	}
}

// run flushes one batch and answers its callers.
func (g *groupCommit[T, R]) run(batch []*gcItem[T, R]) {
	live := make([]*gcItem[T, R], 0, len(batch))
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			it.res <- gcResult[R]{err: context.Cause(it.ctx)}
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	items := make([]T, len(live))
	for i, it := range live {
		items[i] = it.v
	}
	rs, errs := g.flush(context.Background(), items)
	for i, it := range live {
		it.res <- gcResult[R]{v: rs[i], err: errs[i]}
	}
}

func (g *groupCommit[T, R]) close() {
	g.once.Do(func() {
		close(g.done)
		g.wg.Wait()
	})
}
