package jobstore

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// periodic runs a pass every interval on a clock until stopped: the
// lifecycle of the maintenance services (lifecycle.Base).
type periodic struct {
	life lifecycle.Base
}

// start launches pass every interval (the first after one interval).
func (p *periodic) start(ctx context.Context, c clock.Clock, interval time.Duration, pass func(ctx context.Context)) error {
	return p.life.Start(ctx, func(run context.Context) error {
		p.life.Go(func() {
			t := c.NewTimer(interval)
			defer t.Stop()
			for {
				select {
				case <-run.Done():
					return
				case <-t.C():
				}
				pass(run)
				t.Reset(interval)
			}
		})
		return nil
	})
}

// stop ends the loop and waits for a pass in progress, or for ctx.
func (p *periodic) stop(ctx context.Context) error { return p.life.Stop(ctx, nil) }
