package queue

import (
	"context"
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
	in          chan *gcItem[T, R]
	done        chan struct{}
	wg          sync.WaitGroup
	once        sync.Once
	max         int
	flushers    int
	parallelMin int
	flush       func(ctx context.Context, items []T) ([]R, []error)
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
	g := &groupCommit[T, R]{in: make(chan *gcItem[T, R]), done: make(chan struct{}), max: max,
		flushers: max1(flushers), parallelMin: max1(parallelMin), flush: flush}
	g.wg.Add(1)
	go g.dispatch()
	return g
}

func max1(n int) int { return max(n, 1) }

// do submits v and waits for its batch to be flushed.
func (g *groupCommit[T, R]) do(ctx context.Context, v T) (R, error) {
	it := &gcItem[T, R]{ctx: ctx, v: v, res: make(chan gcResult[R], 1)}
	var zero R
	select {
	case g.in <- it:
	case <-g.done:
		return zero, ErrClosed
	case <-ctx.Done():
		return zero, context.Cause(ctx)
	}
	r := <-it.res
	return r.v, r.err
}

func (g *groupCommit[T, R]) dispatch() {
	defer g.wg.Done()
	finished := make(chan struct{}, g.flushers)
	running := 0
	var pending []*gcItem[T, R]
	defer func() {
		for ; running > 0; running-- {
			<-finished
		}
	}()
	for {
		// Start flushes while the rule allows.
		for len(pending) > 0 && running < g.flushers && (running == 0 || len(pending) >= g.parallelMin) {
			n := min(len(pending), g.max)
			batch := pending[:n:n]
			pending = pending[n:]
			running++
			go func() {
				g.run(batch)
				finished <- struct{}{}
			}()
		}
		// Wait for an item or a finished flush; take every item already
		// waiting with it.
		select {
		case it := <-g.in:
			pending = append(pending, it)
		drain:
			for {
				select {
				case it := <-g.in:
					pending = append(pending, it)
				default:
					break drain
				}
			}
		case <-finished:
			running--
		case <-g.done:
			for _, it := range pending {
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
