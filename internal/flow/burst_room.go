package flow

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// BurstRoom learns, from the arrivals of each priority class, how much of
// every quota bucket the more urgent classes' bursts need, so that a
// lower class can leave it unused (Keep.Seconds) and an urgent burst that
// arrives while a batch keeps the upstream saturated is admitted at once
// instead of waiting for refill.
//
// The model: while an urgent burst is served, the lower classes send
// nothing (they only take what lies above the room), so the urgent
// classes have the whole refill to themselves. Their demand, served at
// the refill rate, leaves a backlog
//
//	Q(t) = max(0, Q(t⁻) − dt) + cost/rate     (in seconds of refill)
//
// that grows with each arrival and drains at one second per second. A
// bucket that holds Q when the burst begins admits every request of it at
// once; a bucket that holds less makes some of them wait. The room kept
// for class c is the largest backlog of the classes more urgent than c,
// each remembered in full for Memory after it was reached (so a burst
// that recurs within Memory finds all the room it needs) and then
// decaying with time constant Memory (so a lower class gets the whole
// bucket back once the urgent classes have gone quiet). What the room
// costs a lower class is the room itself, once (it is left in the bucket
// when the lower class's backlog ends), not throughput: everything above
// the room, the whole refill the urgent classes do not use, still goes
// to it.
//
// Everything is measured in seconds of refill at the rate in force when a
// request arrived, so the room follows a limit learned later, a node's
// share of a cluster's bucket, and a key pool (each key keeps its part of
// the room, at its own rate).
//
// Make one with NewBurstRoom. A BurstRoom is not safe for concurrent use:
// its owner serialises access.
type BurstRoom struct {
	memory time.Duration
	// For each prefix p of the classes (critical … class p), per
	// dimension: the backlog, in seconds of refill, as of at[p]; and the
	// peaks that may still be the room, oldest first.
	backlog [llm.NumPriorities - 1][NumDims]float64
	at      [llm.NumPriorities - 1]time.Time
	peaks   [llm.NumPriorities - 1][NumDims]peaks
}

// peaks are the backlogs that may still be remembered as the room,
// oldest and largest first: a backlog B set at t is remembered at now as
// B·g(now − t), where g is 1 for the memory and then decays with it as
// time constant. A later backlog at least as large dominates an earlier
// one for good (it is remembered longer), and so does one that is
// remembered for more at some instant (the older one decays first, and
// no faster), so the front is the room.
type peaks struct {
	b  [maxPeaks]float64
	t  [maxPeaks]time.Time
	n  int
	lo int // index of the front
}

// maxPeaks bounds the peaks kept per prefix and dimension; past it the
// smallest is dropped.
const maxPeaks = 8

// NewBurstRoom returns a BurstRoom that remembers a burst for memory and
// then forgets it over memory (the decay's time constant). With memory
// <= 0 the room is the backlog alone: nothing is kept once a burst has
// been served.
func NewBurstRoom(memory time.Duration) *BurstRoom {
	return &BurstRoom{memory: max(memory, 0)}
}

// PrimeSeconds is the room a BurstRoom assumes before it has seen the
// urgent classes (Prime): the deepest bucket a provider keeps, so that
// the cap (a share of the depth) is what bounds it.
const PrimeSeconds = 60

// Prime assumes that the bursts of the classes more urgent than c may
// need seconds of refill in every dimension, as if that backlog had been
// reached at now: remembered for the memory, then decaying like a burst
// seen. A gateway that has just started has seen none of its urgent
// traffic, and the first burst would otherwise find the buckets a batch
// (the low class) had emptied. Only class c keeps the primed room. With
// memory <= 0, or c critical, it does nothing.
func (r *BurstRoom) Prime(c llm.Priority, seconds float64, now time.Time) {
	if r.memory <= 0 || seconds <= 0 || !c.Valid() || c == llm.Critical {
		return
	}
	for d := range NumDims {
		r.peaks[c-1][d].add(seconds, now)
	}
}

// Arrive records that a request of class c costing cost arrived at now,
// while the buckets it will be admitted from refill at rate per second
// (per dimension; 0 for a dimension not limited, which keeps no room).
func (r *BurstRoom) Arrive(c llm.Priority, cost, rate Amount, now time.Time) {
	r.shift(c, cost, rate, now)
}

// Settle corrects the backlog for a request of class c whose usage is
// known: unused is what its arrival counted (its estimate, the worst case
// of its output) less what it used, per dimension (negative where it used
// more), at the buckets' rate per second. The backlog is then what the
// urgent classes' requests use, not what they reserve until they end: an
// estimate that states the output above what is generated (max_tokens far
// above the answers) would otherwise make steady traffic that the refill
// serves look like a backlog growing without end, and the room would be
// held at its cap against bursts that never come. Peaks already reached
// stay: a burst is admitted at its reservations, before its usage is known.
func (r *BurstRoom) Settle(c llm.Priority, unused, rate Amount, now time.Time) {
	r.shift(c, Amount{}.Sub(unused), rate, now)
}

// shift adds amount (at rate, in seconds of refill) to the backlog of
// every prefix that holds class c, never below zero; a backlog that grows
// may be a new peak.
func (r *BurstRoom) shift(c llm.Priority, amount, rate Amount, now time.Time) {
	if !c.Valid() {
		return
	}
	for p := int(c); p < len(r.backlog); p++ {
		r.drain(p, now)
		for d := range NumDims {
			if rate[d] > 0 && amount[d] != 0 {
				r.backlog[p][d] = math.Max(r.backlog[p][d]+amount[d]/rate[d], 0)
				if amount[d] > 0 && r.memory > 0 {
					r.peaks[p][d].add(r.backlog[p][d], now)
				}
			}
		}
	}
}

// Seconds returns, per dimension, how many seconds of refill a request of
// class c must leave in the buckets at now: the room remembered for the
// classes more urgent than c (nothing for critical).
func (r *BurstRoom) Seconds(c llm.Priority, now time.Time) [NumDims]float64 {
	var s [NumDims]float64
	if !c.Valid() || c == llm.Critical {
		return s
	}
	p := int(c) - 1
	r.drain(p, now)
	for d := range NumDims {
		s[d] = math.Max(r.peaks[p][d].room(now, r.memory), r.backlog[p][d])
	}
	return s
}

// drain brings prefix p's backlog to now.
func (r *BurstRoom) drain(p int, now time.Time) {
	if dt := now.Sub(r.at[p]).Seconds(); dt > 0 {
		for d := range NumDims {
			r.backlog[p][d] = math.Max(r.backlog[p][d]-dt, 0)
		}
		r.at[p] = now
	}
}

func (q *peaks) at(i int) int { return (q.lo + i) % maxPeaks }

// add records backlog b at now: the peaks it dominates go (the back ones
// not larger), and it joins at the back (in place of the smallest when
// full).
func (q *peaks) add(b float64, now time.Time) {
	for q.n > 0 && q.b[q.at(q.n-1)] <= b {
		q.n--
	}
	if q.n == maxPeaks {
		q.n--
	}
	i := q.at(q.n)
	q.b[i], q.t[i] = b, now
	q.n++
}

// room is the largest peak as remembered at now; peaks it has come to
// dominate are dropped from the front.
func (q *peaks) room(now time.Time, memory time.Duration) float64 {
	for q.n > 1 && remember(q.b[q.lo], q.t[q.lo], now, memory) <= remember(q.b[q.at(1)], q.t[q.at(1)], now, memory) {
		q.lo, q.n = q.at(1), q.n-1
	}
	if q.n == 0 {
		return 0
	}
	return remember(q.b[q.lo], q.t[q.lo], now, memory)
}

// remember is a peak b set at t as remembered at now: b for memory, then
// decaying with memory as time constant.
func remember(b float64, t, now time.Time, memory time.Duration) float64 {
	past := now.Sub(t) - memory
	if past <= 0 {
		return b
	}
	return b * math.Exp(-past.Seconds()/memory.Seconds())
}
