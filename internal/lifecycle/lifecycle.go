// Package lifecycle is the one start/stop contract of Sluice's background
// services: the dispatcher, the job service, the maintenance services, the
// cluster node and tenants, the history sampler, the spend flusher, the
// gateway and the mock provider all answer Start and Stop through a Base.
//
// The contract:
//
//   - Start starts the service once. A second Start answers ErrStarted, a
//     Start after Stop answers ErrStopped, and a Start whose context is
//     already done is refused with the context's cause and leaves the
//     service as it was (a later Start may still start it).
//   - A service runs until Stop. Start's context bounds the start itself
//     (opening a store, a first sync); the run context the service's
//     goroutines get keeps its values but not its cancellation or deadline,
//     so a signal that cancels it begins a graceful Stop instead of cutting
//     the service's work off.
//   - Stop is idempotent and safe before Start (the service then never
//     starts). It runs the service's own stop steps, in the order the
//     service writes them, then cancels the run context with the cause
//     ErrStop (so work derived from it tells a deliberate stop from its own
//     cancellation, context.Cause) and waits for the goroutines started
//     with Go, or for Stop's context. A second Stop waits for the first to
//     finish, or for its own context.
//   - A Start that fails leaves the service stopped, its run context
//     canceled and the goroutines it had started waited for.
//
// Base is modeled on River's rivershared/startstop, with Stop taking a
// context and the sentinels above.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

var (
	// ErrStarted is the answer to a second Start.
	ErrStarted = errors.New("already started")
	// ErrStopped is the answer to a Start after Stop (or after a failed
	// Start).
	ErrStopped = errors.New("stopped")
	// ErrStop is the cause Stop gives the run context.
	ErrStop = errors.New("service stopping")
)

// Service is a background component with the one lifecycle.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

type state int

const (
	created state = iota
	running
	stopped
)

// Base holds one service's lifecycle: its state, its run context and its
// goroutines. The zero value is a service not started yet. A service keeps
// a Base in a field and implements Start and Stop with Base.Start and
// Base.Stop. It is safe for concurrent use.
type Base struct {
	mu      sync.Mutex // held for a whole Start; guards the fields below
	state   state
	cancel  context.CancelCauseFunc
	stopped chan struct{} // closed once the first Stop (or a failed Start) has finished
	exited  chan struct{} // closed once Halt has run and every goroutine of Go has returned

	gmu     sync.Mutex // guards the two below
	halted  bool
	running int // goroutines of Go not returned yet
	haltRun sync.Once
}

// Start starts the service: when it is new and ctx is not done, it calls
// start with the run context (see the package doc) while holding the
// Base, so a concurrent Start or Stop waits for it. start launches the
// service's goroutines (with Go, for those Stop waits for) and returns;
// when it fails, the service is stopped and Start returns its error.
func (b *Base) Start(ctx context.Context, start func(run context.Context) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case running:
		return ErrStarted
	case stopped:
		return ErrStopped
	case created:
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	run, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	b.cancel = cancel
	b.stopped, b.exited = make(chan struct{}), make(chan struct{})
	b.state = running
	if err := start(run); err != nil {
		b.state = stopped
		_ = b.Halt(ctx) // what it launched before failing; bounded by ctx
		close(b.stopped)
		return err
	}
	return nil
}

// Go runs f in a goroutine that Stop waits for. It reports false, and
// does not run f, once the service is halting.
func (b *Base) Go(f func()) bool {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	if b.halted {
		return false
	}
	b.running++
	go func() {
		defer b.done()
		f()
	}()
	return true
}

// done counts a goroutine of Go out; the last one out after Halt closes
// exited.
func (b *Base) done() {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	b.running--
	if b.halted && b.running == 0 {
		close(b.exited)
	}
}

// Stop stops the service. Before Start it only marks the service stopped.
// The first Stop after Start calls stop (the service's own steps, nil for
// none) with ctx, then Halt, and returns their errors; a later Stop waits
// for the first one and for the goroutines, or for its own ctx.
func (b *Base) Stop(ctx context.Context, stop func(ctx context.Context) error) error {
	b.mu.Lock()
	switch b.state {
	case created:
		b.state = stopped
		b.mu.Unlock()
		return nil
	case stopped:
		done := b.stopped
		b.mu.Unlock()
		if done == nil {
			return nil // stopped before Start
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the service to stop: %w", context.Cause(ctx))
		}
		return b.Halt(ctx)
	case running:
	}
	b.state = stopped
	b.mu.Unlock()
	var err error
	if stop != nil {
		err = stop(ctx)
	}
	err = errors.Join(err, b.Halt(ctx))
	close(b.stopped)
	return err
}

// Halt cancels the run context with the cause ErrStop and waits for the
// goroutines started with Go to return, or for ctx. Stop calls it after
// the service's stop steps; a step that needs the goroutines gone first
// (a store write after the loop has ended) calls it itself. It is
// idempotent; call it only once the service has started.
func (b *Base) Halt(ctx context.Context) error {
	b.haltRun.Do(func() {
		b.cancel(ErrStop)
		b.gmu.Lock()
		b.halted = true
		if b.running == 0 {
			close(b.exited)
		}
		b.gmu.Unlock()
	})
	select {
	case <-b.exited:
		return nil
	default:
	}
	select {
	case <-b.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the service's goroutines: %w", context.Cause(ctx))
	}
}
