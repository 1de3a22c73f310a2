package queue

import (
	"context"
	"sync"
)

// groupCommit coalesces concurrent calls into batches: each of its flusher
// goroutines takes the first waiting item, every other item already waiting
// (up to max), and hands them to flush in one round trip. Under load many
// callers share one statement and one commit; alone, a call costs one
// statement as before.
type groupCommit[T, R any] struct {
	in    chan *gcItem[T, R]
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	max   int
	flush func(ctx context.Context, items []T) ([]R, []error)
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

func newGroupCommit[T, R any](flushers, max int, flush func(ctx context.Context, items []T) ([]R, []error)) *groupCommit[T, R] {
	g := &groupCommit[T, R]{in: make(chan *gcItem[T, R]), done: make(chan struct{}), max: max, flush: flush}
	for range flushers {
		g.wg.Add(1)
		go g.loop()
	}
	return g
}

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

func (g *groupCommit[T, R]) loop() {
	defer g.wg.Done()
	for {
		var batch []*gcItem[T, R]
		select {
		case it := <-g.in:
			batch = append(batch, it)
		case <-g.done:
			return
		}
	drain:
		for len(batch) < g.max {
			select {
			case it := <-g.in:
				batch = append(batch, it)
			default:
				break drain
			}
		}
		live := batch[:0]
		for _, it := range batch {
			if err := it.ctx.Err(); err != nil {
				it.res <- gcResult[R]{err: context.Cause(it.ctx)}
				continue
			}
			live = append(live, it)
		}
		if len(live) == 0 {
			continue
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
}

func (g *groupCommit[T, R]) close() {
	g.once.Do(func() {
		close(g.done)
		g.wg.Wait()
	})
}
