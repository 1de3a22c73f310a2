package jobstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
)

// Defaults for JobCleanerConfig.
const (
	CleanIntervalDefault      = 5 * time.Minute
	SucceededRetentionDefault = 24 * time.Hour
	DeadRetentionDefault      = 7 * 24 * time.Hour
	CanceledRetentionDefault  = 24 * time.Hour
)

// JobCleanerConfig configures a JobCleaner. A negative retention keeps
// that state forever.
type JobCleanerConfig struct {
	// Interval is the time between passes. Defaults to CleanIntervalDefault.
	Interval time.Duration
	// SucceededRetention is how long succeeded jobs are kept. Defaults to
	// SucceededRetentionDefault.
	SucceededRetention time.Duration
	// DeadRetention is how long dead jobs are kept. Defaults to
	// DeadRetentionDefault.
	DeadRetention time.Duration
	// CanceledRetention is how long canceled jobs are kept. Defaults to
	// CanceledRetentionDefault.
	CanceledRetention time.Duration
	// Limit bounds one delete statement (a pass repeats while full).
	// Defaults to RescueLimitDefault.
	Limit int
	// Clock schedules passes. Defaults to the wall clock.
	Clock clock.Clock
	// OnPass, when set, is called after every pass with the number of
	// jobs deleted and the error. Defaults to nil.
	OnPass func(deleted int, err error)
	// Leading, when set, makes a scheduled pass run only while it returns
	// true: on a cluster, only the leader node cleans (internal/cluster).
	// RunOnce always runs. Defaults to nil (always).
	Leading func() bool
}

// WithDefaults returns c with unset fields filled in.
func (c JobCleanerConfig) WithDefaults() JobCleanerConfig {
	c.Interval = cmp.Or(c.Interval, CleanIntervalDefault)
	c.SucceededRetention = cmp.Or(c.SucceededRetention, SucceededRetentionDefault)
	c.DeadRetention = cmp.Or(c.DeadRetention, DeadRetentionDefault)
	c.CanceledRetention = cmp.Or(c.CanceledRetention, CanceledRetentionDefault)
	c.Limit = cmp.Or(c.Limit, RescueLimitDefault)
	c.Clock = clock.Or(c.Clock)
	return c
}

func (c JobCleanerConfig) validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("Interval: %v is not positive", c.Interval)
	case c.Limit < 1:
		return fmt.Errorf("Limit: %d is below 1", c.Limit)
	}
	return nil
}

// JobCleaner periodically deletes finished jobs older than their state's
// retention, and the records of stored Responses' keys past their expiry.
type JobCleaner struct {
	store Store
	cfg   JobCleanerConfig
	loop  periodic
}

// NewJobCleaner returns a cleaner for store, or an error naming the bad
// config field.
func NewJobCleaner(store Store, cfg JobCleanerConfig) (*JobCleaner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configuring job cleaner: %w", err)
	}
	return &JobCleaner{store: store, cfg: cfg}, nil
}

// Start runs passes every Interval until Stop (lifecycle.Base: a second
// Start answers lifecycle.ErrStarted, a Start after Stop
// lifecycle.ErrStopped).
func (c *JobCleaner) Start(ctx context.Context) error {
	if err := c.loop.start(ctx, c.cfg.Clock, c.cfg.Interval, func(ctx context.Context) {
		if c.cfg.Leading != nil && !c.cfg.Leading() {
			return
		}
		_, _ = c.RunOnce(ctx)
	}); err != nil {
		return fmt.Errorf("starting job cleaner: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for a pass in progress (or ctx). It is
// idempotent and safe before Start.
func (c *JobCleaner) Stop(ctx context.Context) error {
	if err := c.loop.stop(ctx); err != nil {
		return fmt.Errorf("stopping job cleaner: %w", err)
	}
	return nil
}

// RunOnce deletes every expired finished job now and returns how many
// (the expired response keys it deletes too are not counted).
func (c *JobCleaner) RunOnce(ctx context.Context) (int, error) {
	now := c.cfg.Clock.Now()
	total := 0
	var errs []error
	for _, r := range []struct {
		state State
		keep  time.Duration
	}{{StateSucceeded, c.cfg.SucceededRetention}, {StateDead, c.cfg.DeadRetention}, {StateCanceled, c.cfg.CanceledRetention}} {
		if r.keep < 0 {
			continue
		}
		for {
			n, err := c.store.DeleteFinished(ctx, DeleteFinishedParams{State: r.state, Before: now.Add(-r.keep), Now: now, Limit: c.cfg.Limit})
			total += n
			if err != nil {
				errs = append(errs, err)
				break
			}
			if n < c.cfg.Limit {
				break
			}
		}
	}
	// The records of which key created each stored Response, once the
	// provider has forgotten the Response (not jobs: not counted).
	for {
		n, err := c.store.DeleteResponseKeys(ctx, DeleteResponseKeysParams{Now: now, Limit: c.cfg.Limit})
		if err != nil {
			errs = append(errs, err)
			break
		}
		if n < c.cfg.Limit {
			break
		}
	}
	err := errors.Join(errs...)
	if c.cfg.OnPass != nil {
		c.cfg.OnPass(total, err)
	}
	return total, err
}
