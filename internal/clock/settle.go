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
func Settle(limit time.Duration) bool {
	s := []metrics.Sample{
		{Name: "/sched/goroutines/runnable:goroutines"},
		{Name: "/sched/goroutines/running:goroutines"},
		{Name: "/sched/goroutines/not-in-go:goroutines"},
	}
	end := time.Now().Add(limit)
	for quiet := 0; quiet < 3; {
		runtime.Gosched()
		metrics.Read(s)
		if s[0].Value.Uint64() == 0 && s[1].Value.Uint64() <= 1 && s[2].Value.Uint64() == 0 {
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
	for {
		if !Settle(limit) {
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
