// Package storelink keeps the gateway connected to a store it can serve
// without: the job store and the cluster's shared store. Live traffic
// needs neither, so the gateway listens first and a Link connects in the
// background.
//
// The model: a Link opens its store (Config.Open, each attempt bounded by
// Config.AttemptTimeout) until an attempt succeeds, waiting Backoff
// between failures: capped exponential with jitter, on the injected
// clock. Once open it is connected; from then on it watches the store,
// by a Config.Ping every Config.PingInterval or through what its owner
// reports of its own calls (Report), and says when it is lost and when
// it answers again. Each change is logged once and given to
// Config.Observer (the sluice_store_connected gauge).
//
// What to do once a store is open (start the job runtime, share quotas
// with the cluster) is the Open function's; what to do before (serve on
// a conservative local share, answer the jobs API with a 503) is its
// owner's: a Link only connects and tells.
package storelink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/lifecycle"
)

// Defaults of Config.
const (
	// BackoffMinDefault is the wait after the first failed attempt.
	BackoffMinDefault = 250 * time.Millisecond
	// BackoffMaxDefault caps the wait between attempts.
	BackoffMaxDefault = 15 * time.Second
	// AttemptTimeoutDefault bounds one attempt to open the store: a store
	// that accepts connections and never answers costs one of these per
	// attempt, never the gateway's start.
	AttemptTimeoutDefault = 5 * time.Second
	// PingIntervalDefault is how often an open store is checked when
	// Config.Ping is set.
	PingIntervalDefault = 5 * time.Second
	// StartWait is how long the gateway's start waits for a store that
	// is connecting (Await): a healthy store is then ready before the
	// first request, and one that does not answer delays the listener by
	// this at most.
	StartWait = 500 * time.Millisecond
)

// Config configures a Link.
type Config struct {
	// Name names the store in logs and metrics: "jobs" or "cluster".
	// Required.
	Name string
	// Open opens the store and does whatever depends on it (it is called
	// again after a failure, so it must leave nothing behind when it
	// fails). ctx carries the attempt's timeout. Required.
	Open func(ctx context.Context) error
	// Ping checks an open store (nil: the owner reports through Report).
	// Defaults to none.
	Ping func(ctx context.Context) error
	// BackoffMin is the wait after the first failed attempt, at least
	// 1ms. Defaults to 250ms (BackoffMinDefault).
	BackoffMin time.Duration
	// BackoffMax caps the wait between attempts, at least BackoffMin.
	// Defaults to 15s (BackoffMaxDefault).
	BackoffMax time.Duration
	// AttemptTimeout bounds one Open or Ping. Defaults to 5s
	// (AttemptTimeoutDefault).
	AttemptTimeout time.Duration
	// PingInterval is how often Ping runs once open. Defaults to 5s
	// (PingIntervalDefault).
	PingInterval time.Duration
	// Clock times the backoff and the pings. Defaults to the wall clock.
	Clock clock.Clock
	// Jitter returns a number in [0, 1) for the backoff's jitter.
	// Defaults to math/rand/v2's Float64.
	Jitter func() float64
	// Logger receives one line per change of state. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Observer is told every change of state (connected or not; false
	// at Start). Defaults to none.
	Observer func(name string, connected bool)
}

// WithDefaults fills the zero fields. It is pure.
func (c Config) WithDefaults() Config {
	c.BackoffMin = cmp.Or(c.BackoffMin, BackoffMinDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.AttemptTimeout = cmp.Or(c.AttemptTimeout, AttemptTimeoutDefault)
	c.PingInterval = cmp.Or(c.PingInterval, PingIntervalDefault)
	c.Clock = clock.Or(c.Clock)
	if c.Jitter == nil {
		c.Jitter = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = func(string, bool) {}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("Name: required")
	case c.Open == nil:
		return errors.New("Open: required")
	case c.BackoffMin < time.Millisecond:
		return fmt.Errorf("BackoffMin: %v is below 1ms", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("BackoffMax: %v is below BackoffMin (%v)", c.BackoffMax, c.BackoffMin)
	case c.AttemptTimeout <= 0:
		return fmt.Errorf("AttemptTimeout: %v is not positive", c.AttemptTimeout)
	case c.PingInterval <= 0:
		return fmt.Errorf("PingInterval: %v is not positive", c.PingInterval)
	}
	return nil
}

// Backoff is the wait after the failed attempt number attempt (0 for the
// first): min doubled per attempt, capped at max, of which the upper half
// is jittered by j in [0, 1), so gateways restarted together do not
// retry in step. It never returns less than min/2 nor more than max.
func Backoff(attempt int, minWait, maxWait time.Duration, j float64) time.Duration {
	d := minWait
	for i := 0; i < attempt && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	j = min(max(j, 0), 1)
	return d/2 + time.Duration(j*float64(d/2))
}

// State is a Link's view of its store.
type State int

// The states of a Link.
const (
	// Connecting: not opened yet (attempts under way).
	Connecting State = iota
	// Connected: open, and the last check or call succeeded.
	Connected
	// Lost: open, but the last check or call failed.
	Lost
)

func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Lost:
		return "lost"
	case Connecting:
	}
	return "connecting"
}

// Link connects one store in the background (see the package doc). It is
// safe for concurrent use.
type Link struct {
	cfg    Config
	life   lifecycle.Base
	opened chan struct{} // closed once Open succeeded
	tried  chan struct{} // closed once the first attempt ended

	mu       sync.Mutex
	state    State
	attempts int
	lastErr  error
}

// New returns a Link for cfg, or an error naming the invalid field.
func New(cfg Config) (*Link, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("storelink: %w", err)
	}
	return &Link{cfg: cfg, opened: make(chan struct{}), tried: make(chan struct{})}, nil
}

// Start begins connecting in the background and returns at once: nothing
// about the store delays it.
func (l *Link) Start(ctx context.Context) error {
	return l.life.Start(ctx, func(run context.Context) error {
		l.cfg.Observer(l.cfg.Name, false)
		l.life.Go(func() { l.run(run) })
		return nil
	})
}

// Stop ends the attempts or the pings, waiting for one under way (it is
// bounded by AttemptTimeout). It is idempotent and safe before Start; it
// does not close the store (its owner does).
func (l *Link) Stop(ctx context.Context) error {
	return l.life.Stop(ctx, func(context.Context) error { return nil })
}

// Await waits for the first attempt to open the store, for at most d
// on the link's clock or until ctx ends, and reports whether the store
// is open: a store that refuses at once costs no wait.
func (l *Link) Await(ctx context.Context, d time.Duration) bool {
	t := l.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.tried:
	case <-t.C():
	case <-ctx.Done():
	}
	select {
	case <-l.opened:
		return true
	default:
		return false
	}
}

// Opened is closed once the store has been opened.
func (l *Link) Opened() <-chan struct{} { return l.opened }

// State returns the store's state, how many attempts to open it failed
// and the last error (nil once connected).
func (l *Link) State() (State, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state, l.attempts, l.lastErr
}

// Report records the outcome of a call its owner made to the open store:
// nil marks it connected, an error lost. Before the store is open it does
// nothing.
func (l *Link) Report(err error) {
	l.mu.Lock()
	if l.state == Connecting {
		l.mu.Unlock()
		return
	}
	next := Connected
	if err != nil {
		next = Lost
	}
	changed := next != l.state
	l.state, l.lastErr = next, err
	l.mu.Unlock()
	if !changed {
		return
	}
	l.cfg.Observer(l.cfg.Name, next == Connected)
	if next == Lost {
		l.cfg.Logger.Warn("store connection lost: serving on without it", "store", l.cfg.Name, "err", err)
		return
	}
	l.cfg.Logger.Info("store connected again", "store", l.cfg.Name)
}

// markOpen records the store open: connected, and Opened closed.
func (l *Link) markOpen() {
	l.mu.Lock()
	l.state, l.lastErr = Connected, nil
	l.mu.Unlock()
	close(l.opened)
}

func (l *Link) run(ctx context.Context) {
	if !l.connect(ctx) {
		return
	}
	if l.cfg.Ping == nil {
		return
	}
	t := l.cfg.Clock.NewTimer(l.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		pctx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
		err := l.cfg.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.Report(err)
		t.Reset(l.cfg.PingInterval)
	}
}

// connect tries Open until it succeeds (true) or ctx ends (false).
func (l *Link) connect(ctx context.Context) bool {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, l.cfg.AttemptTimeout)
		err := l.cfg.Open(actx)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			l.markOpen()
		}
		if attempt == 0 {
			close(l.tried)
		}
		if err == nil {
			l.cfg.Observer(l.cfg.Name, true)
			l.cfg.Logger.Info("store connected", "store", l.cfg.Name, "failed_attempts", attempt)
			return true
		}
		wait := Backoff(attempt, l.cfg.BackoffMin, l.cfg.BackoffMax, l.cfg.Jitter())
		l.mu.Lock()
		l.attempts, l.lastErr = attempt+1, err
		l.mu.Unlock()
		if attempt == 0 {
			l.cfg.Logger.Warn("store not reachable: serving without it, connecting in the background",
				"store", l.cfg.Name, "err", err, "retry_in", wait)
		} else {
			l.cfg.Logger.Debug("store still not reachable", "store", l.cfg.Name, "attempt", attempt+1, "err", err, "retry_in", wait)
		}
		if clock.Sleep(ctx, l.cfg.Clock, wait) != nil {
			return false
		}
	}
}
