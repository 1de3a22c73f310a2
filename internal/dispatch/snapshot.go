package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// Snapshot is a Dispatcher's state for operators and metrics.
type Snapshot struct {
	// Name is the upstream's name.
	Name string
	// Queued is the queue length per class (critical first).
	Queued [llm.NumPriorities]int
	// InFlight is how many requests are being sent or streamed.
	InFlight int
	// ConcurrencyLimit is the adaptive concurrency limit now.
	ConcurrencyLimit int
	// Buckets are the quota buckets per dimension (flow.Requests,
	// flow.InputTokens, flow.OutputTokens, flow.Tokens).
	Buckets [flow.NumDims]flow.BucketState
	// Breaker is the circuit breaker's state.
	Breaker flow.BreakerState
	// BreakerReadyAt is when an open breaker half-opens (zero otherwise).
	BreakerReadyAt time.Time
	// PausedUntil is the end of the current upstream pause (zero or past
	// when not paused).
	PausedUntil time.Time
	// RateScale is the share of its limits the upstream refills at: below
	// 1 after a "Slow Down", ramping back to 1.
	RateScale float64
	// KeysIn and KeysOut count the key pool's keys in and taken out
	// (Dispatcher.Keys lists them). Buckets are the sums over the keys,
	// PausedUntil the earliest key's pause end and RateScale the lowest:
	// for a pool of one, its key's.
	KeysIn, KeysOut int
	// Reserved is the estimated cost of the requests in flight, per
	// dimension: the part of the buckets' use not yet settled.
	Reserved flow.Amount
	// Room is, per class, what its requests leave unused in each bucket
	// for the more urgent classes (the learned room for their bursts, or
	// the configured headroom while it applies), summed over the keys in
	// the pool; critical's is zero.
	Room [llm.NumPriorities]flow.Amount
}

// Snapshot returns the dispatcher's current state. It is cheap enough to
// call on every metrics scrape.
func (d *Dispatcher) Snapshot() Snapshot {
	now := d.clk.Now()
	s := Snapshot{Name: d.cfg.Name, ConcurrencyLimit: d.aimd.Limit(), RateScale: 1}
	s.Breaker, s.BreakerReadyAt = d.brk.State(now)
	d.mu.Lock()
	keys := d.keyStates(now)
	for i, k := range keys {
		if k.Out {
			s.KeysOut++
		} else {
			s.KeysIn++
		}
		for dim := range s.Buckets {
			s.Buckets[dim].Capacity += k.Buckets[dim].Capacity
			s.Buckets[dim].Depth += k.Buckets[dim].Depth
			s.Buckets[dim].Level += k.Buckets[dim].Level
			if kb := k.Buckets[dim]; !kb.ReportedAt.IsZero() {
				// The provider's view, summed over the keys that reported.
				sb := &s.Buckets[dim]
				if sb.ReportedAt.IsZero() {
					sb.Reported = flow.Observation{Remaining: 0}
				}
				sb.Reported.Limit += max(kb.Reported.Limit, 0)
				sb.Reported.Remaining += max(kb.Reported.Remaining, 0)
				sb.ReportedAt = maxTime(sb.ReportedAt, kb.ReportedAt)
			}
		}
		if i == 0 || k.PausedUntil.Before(s.PausedUntil) {
			s.PausedUntil = k.PausedUntil
		}
		s.RateScale = min(s.RateScale, d.keys[i].lim.Scale(now))
	}
	for c := range s.Queued {
		s.Queued[c] = d.sched.LenClass(llm.Priority(c))
	}
	s.InFlight = d.inflight
	s.Reserved = d.reserved
	for c := llm.High; c < llm.NumPriorities; c++ {
		keep := d.headroom(c, now)
		for _, k := range d.keys {
			if !k.out {
				s.Room[c] = s.Room[c].Add(k.lim.Held(keep, now))
			}
		}
	}
	d.mu.Unlock()
	return s
}

// Keys returns the state of every key of the pool, in configuration
// order.
func (d *Dispatcher) Keys() []KeyState {
	now := d.clk.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.keyStates(now)
}
