package jobsapi

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// waitFinished returns job id once it is finished, or as it is when wait
// passes first (or ctx ends: then the error is ctx's, with the job last
// seen). A job finished in this process wakes it at once (Runtime.Finished);
// one finished elsewhere is seen at the next read, every PollInterval.
func (a *API) waitFinished(ctx context.Context, id int64, wait time.Duration) (*jobstore.Job, error) {
	j, err := a.store.Get(ctx, id)
	if err != nil || wait <= 0 || j.State.Finished() {
		return j, err
	}
	deadline := a.cfg.Clock.NewTimer(wait)
	defer deadline.Stop()
	poll := a.cfg.Clock.NewTimer(a.cfg.PollInterval)
	defer poll.Stop()
	for {
		finished := a.rt.Finished()
		select {
		case <-ctx.Done():
			return j, context.Cause(ctx)
		case <-deadline.C():
			return j, nil
		case <-finished:
		case <-poll.C():
			poll.Reset(a.cfg.PollInterval)
		}
		next, err := a.store.Get(ctx, id)
		if err != nil {
			return j, err
		}
		j = next
		if j.State.Finished() {
			return j, nil
		}
	}
}

// parseWait accepts a Go duration ("30s", "1m") or whole seconds ("30").
func parseWait(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%q is negative", v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration like 30s, got %q", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v)
	}
	return d, nil
}
