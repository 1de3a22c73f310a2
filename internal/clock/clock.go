// Package clock is the one source of time for every Sluice component.
//
// Components take a Clock instead of calling time.Now, time.Sleep or
// time.After, so that limiters, schedulers, breakers, backoff and lease
// rescuers can be tested on a Fake clock: deterministically, and in
// milliseconds of real time. Pure algorithms go one step further and take
// `now time.Time` as a parameter.
//
// Real() is the wall clock. NewFake returns a clock that only moves when the
// test calls Advance or Set; timers created from it fire, in deadline order,
// as time passes over their deadlines. A test that runs alone can move it
// only while the code under test rests (Fake.StepUntil, Settle), so that
// latencies measured on it are the algorithms' and not the machine's.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has
	// passed. A d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that Sluice uses, as an interface so a
// Fake clock can provide its own.
type Timer interface {
	// C is the channel on which the time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped the timer (false if it had already fired or been stopped).
	Stop() bool
	// Reset changes the timer to fire after d. It reports whether the timer
	// had been active.
	Reset(d time.Duration) bool
}

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Sleep waits for d on c, or until ctx is done, whichever comes first. It
// returns ctx's cause when the context ended the wait, nil otherwise.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C():
		return nil
	}
}

// Since returns the time elapsed since t on c.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Or returns c, or the wall clock when c is nil. Config structs use it in
// WithDefaults.
func Or(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}
