package mock

import (
	"math/rand/v2"
	"sync"
	"time"
)

type faultKind int

const (
	faultNone     faultKind = iota
	faultSpendCap           // terminal 429
	faultOverload           // 529 / OpenAI 503
	faultStatus             // a 5xx from ErrorStatuses or an outage
	faultReset              // TCP reset instead of an answer
)

// fault is the decision for one request.
type fault struct {
	kind   faultKind
	status int
	html   bool // render as an edge proxy's HTML page
	// streamErrorAfter is the number of content deltas before an injected
	// stream error; -1 for none.
	streamErrorAfter int
	slow             time.Duration
}

// faultEngine draws faults from a generator seeded by Config.Seed, so a
// sequence of requests at given times meets the same faults on every run.
type faultEngine struct {
	mu       sync.Mutex
	f        Faults
	rng      *rand.Rand
	seed     uint64
	start    time.Time
	storm    bool      // in a correlated overload burst
	nextFlip time.Time // when the storm state next changes; zero = not started
}

func newFaultEngine(f Faults, seed uint64, start time.Time) *faultEngine {
	e := &faultEngine{seed: seed}
	e.set(f, start)
	return e
}

// set replaces the faults and restarts the random sequence and the storm
// process from start.
func (e *faultEngine) set(f Faults, start time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.f = f
	e.rng = rand.New(rand.NewPCG(e.seed, 0x51a1ce))
	e.start = start
	e.storm = false
	e.nextFlip = time.Time{}
}

func (e *faultEngine) get() Faults {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.f.WithDefaults() // a copy, slices included
}

func (e *faultEngine) hit(p float64) bool { return p > 0 && e.rng.Float64() < p }

// stormAt advances the on/off Markov process to now. e.mu must be held.
func (e *faultEngine) stormAt(now time.Time) bool {
	f := e.f
	if f.OverloadBurst <= 0 || f.OverloadGap <= 0 {
		return false
	}
	draw := func(mean time.Duration) time.Duration {
		return max(time.Millisecond, time.Duration(e.rng.ExpFloat64()*float64(mean)))
	}
	if e.nextFlip.IsZero() {
		e.nextFlip = e.start.Add(draw(f.OverloadGap))
	}
	for !now.Before(e.nextFlip) {
		e.storm = !e.storm
		mean := f.OverloadGap
		if e.storm {
			mean = f.OverloadBurst
		}
		e.nextFlip = e.nextFlip.Add(draw(mean))
	}
	return e.storm
}

// decide returns the fault for a request arriving at now.
func (e *faultEngine) decide(now time.Time) fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	f := e.f
	d := fault{streamErrorAfter: -1}
	if e.hit(f.StreamErrorRate) {
		d.streamErrorAfter = f.StreamErrorAfter
	}
	if e.hit(f.SlowRate) {
		d.slow = f.SlowExtra
	}
	since := now.Sub(e.start)
	switch {
	case f.SpendCap:
		d.kind = faultSpendCap
	case e.outage(since, &d):
	case e.stormAt(now), e.hit(f.OverloadRate):
		d.kind = faultOverload
	case e.hit(f.ErrorRate):
		d.kind = faultStatus
		d.status = f.ErrorStatuses[e.rng.IntN(len(f.ErrorStatuses))]
		d.html = (d.status == 502 || d.status == 503) && e.hit(f.HTMLErrorRate)
	case e.hit(f.ResetRate):
		d.kind = faultReset
	}
	return d
}

// flexUnavailable draws whether a flex request finds no capacity (nothing
// is drawn while the rate is 0, so the other faults' sequence is unchanged).
func (e *faultEngine) flexUnavailable() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hit(e.f.FlexUnavailableRate)
}

// outage fills d when since falls in a scheduled outage. e.mu must be held.
func (e *faultEngine) outage(since time.Duration, d *fault) bool {
	for _, o := range e.f.Outages {
		if since >= o.Start && since < o.Start+o.Duration {
			if o.Status == 529 {
				d.kind = faultOverload
			} else {
				d.kind, d.status = faultStatus, o.Status
			}
			return true
		}
	}
	return false
}
