package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. The zero value is not usable;
// create one with NewFake. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers are added
}

// NewFake returns a Fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	f.arm(t, d)
	return t
}

// Advance moves the clock forward by d, firing every timer whose deadline
// falls within it, in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.Set(target)
}

// Set moves the clock to t (never backwards), firing due timers in order.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		if len(f.timers) == 0 || f.timers[0].when.After(t) {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		next := f.timers[0]
		f.timers = f.timers[1:]
		next.active = false
		if next.when.After(f.now) {
			f.now = next.when
		}
		// Deliver under the lock (the send never blocks): a Stop or Reset
		// racing with the fire must see it either not yet fired (and still
		// scheduled) or fired with the value in the channel, never popped
		// but not yet delivered.
		select {
		case next.ch <- f.now:
		default:
		}
		f.mu.Unlock()
	}
}

// Timers returns how many timers are waiting to fire.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns when the earliest waiting timer fires, and false when no
// timer is waiting: a test driving the clock event by event moves it
// there.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	return f.timers[0].when, true
}

// WaitForTimers blocks until at least n timers are waiting, so a test can
// advance time only once the code under test is asleep. It gives up and
// returns false after the real-time limit.
func (f *Fake) WaitForTimers(n int, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// arm schedules t at now+d; f.mu must be held.
func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	t.when = f.now.Add(d)
	if d <= 0 {
		t.active = false
		select {
		case t.ch <- f.now:
		default:
		}
		return
	}
	t.active = true
	f.timers = append(f.timers, t)
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
	close(f.changed)
	f.changed = make(chan struct{})
}

// remove unschedules t; f.mu must be held. It reports whether t was active.
func (f *Fake) remove(t *fakeTimer) bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			break
		}
	}
	return true
}

type fakeTimer struct {
	f      *Fake
	ch     chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.remove(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.f.remove(t)
	// Drain a stale fire, as time.Timer.Reset does since Go 1.23.
	select {
	case <-t.ch:
	default:
	}
	t.f.arm(t, d)
	return was
}
