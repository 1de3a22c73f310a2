package jobstore

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
)

// Defaults for JobRescuerConfig.
const (
	RescueIntervalDefault = 30 * time.Second
	MaxStallsDefault      = 3
)

// JobRescuerConfig configures a JobRescuer.
type JobRescuerConfig struct {
	// Interval is the time between passes. Defaults to
	// RescueIntervalDefault.
	Interval time.Duration
	// MaxStalls is how many expired leases a job survives; the next one
	// kills it. Defaults to MaxStallsDefault.
	MaxStalls int
	// Limit bounds the jobs touched per pass (a pass repeats while full).
	// Defaults to RescueLimitDefault.
	Limit int
	// Clock schedules passes and gives their Now. Defaults to the wall
	// clock.
	Clock clock.Clock
	// OnPass, when set, is called after every pass with its totals and
	// error (for logs and metrics). Defaults to nil.
	OnPass func(RescueResult, error)
}

// WithDefaults returns c with unset fields filled in.
func (c JobRescuerConfig) WithDefaults() JobRescuerConfig {
	c.Interval = cmp.Or(c.Interval, RescueIntervalDefault)
	c.MaxStalls = cmp.Or(c.MaxStalls, MaxStallsDefault)
	c.Limit = cmp.Or(c.Limit, RescueLimitDefault)
	c.Clock = clock.Or(c.Clock)
	return c
}

func (c JobRescuerConfig) validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("Interval: %v is not positive", c.Interval)
	case c.MaxStalls < 0:
		return fmt.Errorf("MaxStalls: %d is negative", c.MaxStalls)
	case c.Limit < 1:
		return fmt.Errorf("Limit: %d is below 1", c.Limit)
	}
	return nil
}

// JobRescuer periodically returns jobs whose lease expired to the queue
// (counting a stall, or killing them past MaxStalls) and kills queued jobs
// past their deadline.
type JobRescuer struct {
	store Store
	cfg   JobRescuerConfig
	loop  periodic
}

// NewJobRescuer returns a rescuer for store, or an error naming the bad
// config field.
func NewJobRescuer(store Store, cfg JobRescuerConfig) (*JobRescuer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configuring job rescuer: %w", err)
	}
	return &JobRescuer{store: store, cfg: cfg}, nil
}

// Start runs passes every Interval until Stop (lifecycle.Base: a second
// Start answers lifecycle.ErrStarted, a Start after Stop
// lifecycle.ErrStopped).
func (r *JobRescuer) Start(ctx context.Context) error {
	if err := r.loop.start(ctx, r.cfg.Clock, r.cfg.Interval, func(ctx context.Context) { _, _ = r.RunOnce(ctx) }); err != nil {
		return fmt.Errorf("starting job rescuer: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for a pass in progress (or ctx). It is
// idempotent and safe before Start.
func (r *JobRescuer) Stop(ctx context.Context) error {
	if err := r.loop.stop(ctx); err != nil {
		return fmt.Errorf("stopping job rescuer: %w", err)
	}
	return nil
}

// RunOnce runs one pass now, repeating while batches come back full.
func (r *JobRescuer) RunOnce(ctx context.Context) (RescueResult, error) {
	var total RescueResult
	var err error
	for {
		var res RescueResult
		res, err = r.store.Rescue(ctx, RescueParams{MaxStalls: r.cfg.MaxStalls, Limit: r.cfg.Limit, Now: r.cfg.Clock.Now()})
		total.Requeued += res.Requeued
		total.Dead += res.Dead
		total.Expired += res.Expired
		if err != nil || (res.Requeued+res.Dead < r.cfg.Limit && res.Expired < r.cfg.Limit) {
			break
		}
	}
	if r.cfg.OnPass != nil {
		r.cfg.OnPass(total, err)
	}
	return total, err
}
