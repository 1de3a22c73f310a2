package jobstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
)

// errStopped is the cause given to a service's context by Stop.
var errStopped = errors.New("service stopped")

// periodic runs a pass every interval on a clock until stopped. It is the
// shared Start/Stop lifecycle of the maintenance services: Stop is
// idempotent and safe before Start.
type periodic struct {
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// start launches pass every interval (the first after one interval).
func (p *periodic) start(ctx context.Context, c clock.Clock, interval time.Duration, pass func(ctx context.Context)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return errors.New("already started")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		t := c.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			pass(ctx)
			t.Reset(interval)
		}
	}()
	return nil
}

// stop ends the loop and waits for it, or for ctx.
func (p *periodic) stop(ctx context.Context) error {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel(errStopped)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
