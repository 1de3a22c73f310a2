package flow

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// BreakerState is a circuit breaker's state.
type BreakerState int

// Breaker states.
const (
	// Closed lets every request through and counts failures.
	Closed BreakerState = iota
	// Open lets nothing through until the open period ends.
	Open
	// HalfOpen lets a bounded number of probes through.
	HalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("breaker_state(%d)", int(s))
}

// Result is what an admitted request reports back to the breaker.
type Result int

// Results.
const (
	// Neutral neither helps nor hurts: RATE 429, client errors, cancelled
	// or unsent attempts. It frees a half-open probe slot.
	Neutral Result = iota
	// Healthy is a success (the upstream answered properly).
	Healthy
	// Failed is an overload or transient failure.
	Failed
)

// ErrOpen is returned by Allow while the breaker refuses requests.
var ErrOpen = errors.New("circuit breaker open")

// BreakerConfig configures a Breaker. Every field is required; the
// user-facing defaults are upstream.Config's.
type BreakerConfig struct {
	// Window is the closed-state counting interval; counts reset at its end.
	Window time.Duration
	// MinRequests is the fewest results in a window before FailureRatio
	// applies.
	MinRequests int
	// FailureRatio trips the breaker when failures/results reaches it.
	FailureRatio float64
	// ConsecutiveFailures trips the breaker after this many failures in a
	// row.
	ConsecutiveFailures int
	// OpenTimeout is the mean open period; each opening lasts a uniformly
	// jittered 75–125 % of it.
	OpenTimeout time.Duration
	// HalfOpenProbes is how many requests half-open lets through at once;
	// that many successes close the breaker.
	HalfOpenProbes int
}

// Validate reports a field out of range, by name.
func (c BreakerConfig) Validate() error {
	switch {
	case c.Window <= 0:
		return fmt.Errorf("Breaker.Window must be > 0, got %v", c.Window)
	case c.MinRequests < 1:
		return fmt.Errorf("Breaker.MinRequests must be >= 1, got %d", c.MinRequests)
	case !(c.FailureRatio > 0 && c.FailureRatio <= 1):
		return fmt.Errorf("Breaker.FailureRatio must be in (0, 1], got %v", c.FailureRatio)
	case c.ConsecutiveFailures < 1:
		return fmt.Errorf("Breaker.ConsecutiveFailures must be >= 1, got %d", c.ConsecutiveFailures)
	case c.OpenTimeout <= 0:
		return fmt.Errorf("Breaker.OpenTimeout must be > 0, got %v", c.OpenTimeout)
	case c.HalfOpenProbes < 1:
		return fmt.Errorf("Breaker.HalfOpenProbes must be >= 1, got %d", c.HalfOpenProbes)
	}
	return nil
}

// Breaker is a circuit breaker in the style of sony/gobreaker: Closed counts
// results per Window and trips to Open on FailureRatio (with MinRequests) or
// ConsecutiveFailures; Open refuses until a jittered OpenTimeout passes;
// HalfOpen admits HalfOpenProbes at a time, closes after that many
// successes and reopens on any failure.
//
// Use is two-step: Allow(now) returns a generation; Done(gen, result, now)
// reports the outcome. The generation changes with every state change and
// window reset, so a late result from a previous state is ignored. A
// Breaker is safe for concurrent use; onChange runs outside its lock.
type Breaker struct {
	mu       sync.Mutex
	cfg      BreakerConfig
	rnd      *rand.Rand
	onChange func(from, to BreakerState)

	state       BreakerState
	gen         uint64
	expiry      time.Time // end of window (closed) or of open period
	results     int
	failures    int
	consecutive int
	probes      int // half-open: in flight
	successes   int // half-open: successes so far
	prev        BreakerState
	changed     bool
	// outageSince is when the breaker last left Closed: the start of the
	// outage it is in (kept across open → half-open → open); zero while
	// Closed.
	outageSince time.Time
	// held keeps an Open breaker open until Force(Closed): an operator
	// holding it open during a known incident.
	held bool
	// probeLimit caps HalfOpenProbes (< 0: no cap): a cluster node without
	// the shared probe token probes not at all (SetProbeLimit).
	probeLimit int
}

// NewBreaker returns a closed Breaker. rnd jitters the open period (nil: a
// fixed seed); onChange, when not nil, is told of every state change and
// must not block.
func NewBreaker(cfg BreakerConfig, rnd *rand.Rand, onChange func(from, to BreakerState), now time.Time) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(1, 2))
	}
	return &Breaker{cfg: cfg, rnd: rnd, onChange: onChange, expiry: now.Add(cfg.Window), probeLimit: -1}, nil
}

// probes is how many probes half-open lets through at once; b.mu held.
func (b *Breaker) maxProbes() int {
	if b.probeLimit >= 0 {
		return min(b.cfg.HalfOpenProbes, b.probeLimit)
	}
	return b.cfg.HalfOpenProbes
}

// SetProbeLimit caps how many probes half-open lets through at once
// (n < 0: HalfOpenProbes, the default). A cluster node sets 0 while
// another node holds the shared probe token, so only a bounded number of
// probes go out cluster-wide. Successes still close the breaker after
// HalfOpenProbes of them.
func (b *Breaker) SetProbeLimit(n int) {
	b.mu.Lock()
	b.probeLimit = n
	b.mu.Unlock()
}

// OpenUntil opens the breaker until until, as another node of the cluster
// saw the upstream fail: a Closed breaker opens (an instant already past
// makes it half-open at once), an Open one whose period ends earlier is
// extended, and a HalfOpen one reopens when until is still ahead (a
// probe failed elsewhere). Results of requests admitted before are
// ignored (a new generation).
func (b *Breaker) OpenUntil(until, now time.Time) {
	b.mu.Lock()
	from, to := b.tick(now)
	switch {
	case b.state == Closed, b.state == Open && b.expiry.Before(until), b.state == HalfOpen && until.After(now):
		b.set(Open, now)
		b.expiry = until
	}
	f2, t2 := b.lastChange()
	from3, to3 := b.tick(now)
	b.mu.Unlock()
	b.notify(from, to)
	b.notify(f2, t2)
	b.notify(from3, to3)
}

// Reset closes the breaker, as the cluster's probe succeeded at another
// node.
func (b *Breaker) Reset(now time.Time) {
	b.mu.Lock()
	from, to := b.tick(now)
	if b.state != Closed {
		b.set(Closed, now)
	}
	f2, t2 := b.lastChange()
	b.mu.Unlock()
	b.notify(from, to)
	b.notify(f2, t2)
}

// State returns the state at now (Open becomes HalfOpen when its period
// has passed) and, when Open, the instant it will half-open.
func (b *Breaker) State(now time.Time) (BreakerState, time.Time) {
	b.mu.Lock()
	from, to := b.tick(now)
	s, at := b.state, time.Time{}
	if s == Open && !b.held {
		at = b.expiry
	}
	b.mu.Unlock()
	b.notify(from, to)
	return s, at
}

// OutageSince returns when the breaker last left Closed, the start of the
// outage it is in, or the zero time while it is Closed.
func (b *Breaker) OutageSince() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.outageSince
}

// Ready reports whether Allow would succeed at now, without taking a probe
// slot; when it would not and the breaker is Open, readyAt is when it
// half-opens (zero in HalfOpen with every probe out: wait for a result).
func (b *Breaker) Ready(now time.Time) (ok bool, readyAt time.Time) {
	b.mu.Lock()
	from, to := b.tick(now)
	switch b.state {
	case Closed:
		ok = true
	case Open:
		if !b.held {
			readyAt = b.expiry
		}
	case HalfOpen:
		ok = b.probes < b.maxProbes()
	}
	b.mu.Unlock()
	b.notify(from, to)
	return ok, readyAt
}

// Allow admits one request and returns its generation, or ErrOpen.
func (b *Breaker) Allow(now time.Time) (uint64, error) {
	b.mu.Lock()
	from, to := b.tick(now)
	var err error
	switch b.state {
	case Open:
		err = ErrOpen
	case HalfOpen:
		if b.probes >= b.maxProbes() {
			err = ErrOpen
		} else {
			b.probes++
		}
	case Closed:
		// Closed admits every request.
	}
	gen := b.gen
	b.mu.Unlock()
	b.notify(from, to)
	return gen, err
}

// Done reports the result of a request admitted in generation gen. Results
// from an older generation are ignored.
func (b *Breaker) Done(gen uint64, r Result, now time.Time) {
	b.mu.Lock()
	from, to := b.tick(now)
	if gen == b.gen {
		switch b.state {
		case Closed:
			b.recordClosed(r, now)
		case HalfOpen:
			b.recordHalfOpen(r, now)
		case Open:
			// Nothing admitted in this generation is counted while open:
			// the open period alone decides when probing starts.
		}
	}
	f2, t2 := b.lastChange()
	b.mu.Unlock()
	b.notify(from, to)
	b.notify(f2, t2)
}

func (b *Breaker) recordClosed(r Result, now time.Time) {
	switch r {
	case Healthy:
		b.results++
		b.consecutive = 0
	case Failed:
		b.results++
		b.failures++
		b.consecutive++
		if b.consecutive >= b.cfg.ConsecutiveFailures ||
			(b.results >= b.cfg.MinRequests && float64(b.failures) >= b.cfg.FailureRatio*float64(b.results)) {
			b.set(Open, now)
		}
	case Neutral:
		// Neutral results say nothing about the upstream's health.
	}
}

func (b *Breaker) recordHalfOpen(r Result, now time.Time) {
	if b.probes > 0 {
		b.probes--
	}
	switch r {
	case Healthy:
		b.successes++
		if b.successes >= b.cfg.HalfOpenProbes {
			b.set(Closed, now)
		}
	case Failed:
		b.set(Open, now)
	case Neutral:
		// A neutral probe frees its slot without moving the breaker.
	}
}

// tick applies time-driven transitions; b.mu held. It returns the change
// made, if any (from == to when none).
func (b *Breaker) tick(now time.Time) (from, to BreakerState) {
	from = b.state
	switch {
	case b.state == Closed && !now.Before(b.expiry):
		b.newGeneration(now)
	case b.state == Open && !b.held && !now.Before(b.expiry):
		b.set(HalfOpen, now)
	}
	b.changed = false
	return from, b.state
}

func (b *Breaker) set(s BreakerState, now time.Time) {
	b.prev, b.changed = b.state, true
	switch {
	case s == Closed:
		b.outageSince = time.Time{}
	case b.state == Closed:
		b.outageSince = now
	}
	b.state = s
	b.newGeneration(now)
}

func (b *Breaker) lastChange() (from, to BreakerState) {
	if !b.changed {
		return b.state, b.state
	}
	b.changed = false
	return b.prev, b.state
}

func (b *Breaker) newGeneration(now time.Time) {
	b.gen++
	b.results, b.failures, b.consecutive, b.probes, b.successes = 0, 0, 0, 0, 0
	switch b.state {
	case Closed:
		b.expiry = now.Add(b.cfg.Window)
	case Open:
		jitter := 0.75 + 0.5*b.rnd.Float64()
		b.expiry = now.Add(time.Duration(jitter * float64(b.cfg.OpenTimeout)))
	case HalfOpen:
		b.expiry = time.Time{}
	}
}

func (b *Breaker) notify(from, to BreakerState) {
	if from != to && b.onChange != nil {
		b.onChange(from, to)
	}
}

// Force moves the breaker by hand and returns the state it left: Closed
// resets it (a fresh window, any hold released); Open opens it and holds
// it open until the next Force(Closed), with no probe meanwhile. Unlike
// the automatic transitions it does not call onChange: the caller reports
// the change (with its cause) itself.
func (b *Breaker) Force(s BreakerState, now time.Time) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.state
	b.held = s == Open
	b.set(s, now)
	b.changed = false
	return from
}

// Held reports whether an operator holds the breaker open (Force(Open)).
func (b *Breaker) Held() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}
