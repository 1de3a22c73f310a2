package clock

import (
	"errors"
	"runtime"
	"runtime/metrics"
	"time"
)

// Settle waits until every goroutine but the caller's is blocked (on a
// Fake's timer, a channel, a lock), as the runtime's scheduler reports on
// three samples in a row, and reports true; it reports false once limit
// has passed on the wall clock.
//
// The scheduler counts the goroutines of the whole process, and one
// waiting on the network counts as blocked: only a test that runs alone
// (not parallel) and serves its peers in-process may rely on it.
func Settle(limit time.Duration) bool { return SettleAbove(0, limit) }

// outsideGo is the runtime metric of the goroutines in a system call or
// in C.
const outsideGo = "/sched/goroutines/not-in-go:goroutines"

// OutsideGo is the fewest goroutines found outside Go (in a system call
// or in C) over a few samples: those that stay there for good, as
// os/signal's loop does in a program that called signal.Notify.
func OutsideGo() uint64 {
	s := []metrics.Sample{{Name: outsideGo}}
	least := ^uint64(0)
	for range 5 {
		runtime.Gosched()
		metrics.Read(s)
		least = min(least, s[0].Value.Uint64())
	}
	return least
}

// SettleAbove is Settle in a process where base goroutines stay outside
// Go for good (OutsideGo): it waits for no more than base to be.
func SettleAbove(base uint64, limit time.Duration) bool {
	s := []metrics.Sample{
		{Name: "/sched/goroutines/runnable:goroutines"},
		{Name: "/sched/goroutines/running:goroutines"},
		{Name: outsideGo},
	}
	end := time.Now().Add(limit)
	for quiet := 0; quiet < 3; {
		runtime.Gosched()
		metrics.Read(s)
		if s[0].Value.Uint64() == 0 && s[1].Value.Uint64() <= 1 && s[2].Value.Uint64() <= base {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// ErrNothingWaits is StepUntil's answer when no timer waits on the clock
// and done does not hold.
var ErrNothingWaits = errors.New("nothing waits on the fake clock")

// StepUntil moves f from rest to rest until done holds: it Settles (each
// time within limit), checks done, and moves f to its next timer. What a
// test measures on f is then the time of the code under test, whatever the
// machine's load: nothing moves the clock while work it set off is still
// running. See Settle for who may use it.
func (f *Fake) StepUntil(done func() bool, limit time.Duration) error {
	return f.StepUntilAbove(done, 0, limit)
}

// StepUntilAbove is StepUntil settling with SettleAbove(base, limit).
func (f *Fake) StepUntilAbove(done func() bool, base uint64, limit time.Duration) error {
	for {
		if !SettleAbove(base, limit) {
			return errors.New("the goroutines never came to rest")
		}
		if done() {
			return nil
		}
		next, ok := f.Next()
		if !ok {
			return ErrNothingWaits
		}
		f.Set(next)
	}
}
