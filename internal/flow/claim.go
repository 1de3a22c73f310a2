package flow

import (
	"math"
	"time"
)

// BypassShare is the share of the refill since a head began waiting for
// it that may be reserved past the head (by the requests of its class
// admitted with Keep.Past and, counted first, those of more urgent
// classes): the head keeps the rest, so it is admitted at most
// 1/(1−BypassShare) times as late as it would be alone (docs/engine.md,
// "Heavy tails: going past a waiting head").
const BypassShare = 0.5

// StrictRecheck is the wait a Limiter reports for a cost that cannot fit
// now for a reason refill alone does not lift (too big to leave a strict
// keep with its bucket full; a waiting head's room above the depth): the
// caller knows what changes it.
const StrictRecheck = time.Second

// claim is what a head waiting for refill holds of a Limiter's buckets
// against the admissions past it: what they may reserve, in each bucket
// its cost uses, is at most BypassShare of the refill since it began
// waiting plus what it did not need then.
type claim struct {
	head  any // nil: none
	cost  Amount
	keep  Keep
	since time.Time
	// slack is, per bucket, how much more than the head needs it held at
	// since; taken is what was reserved since (the head's own
	// reservation ends the claim).
	slack Amount
	taken Amount
}

// Claim records that head (a comparable value naming it) waits from now
// for this Limiter's buckets to refill for cost while leaving keep (its
// own: Past is ignored). Until Unclaim or a Claim for another head,
// every reservation counts against the head's claim, and an admission
// whose Keep is Past fits only while, in every bucket both costs use,
// what was reserved since the head began waiting, with it, is within
// BypassShare of the refill since plus what the head did not need then;
// and not while the head gathers room above the bucket's depth (a small
// reservation would cap the level at the depth again). Claiming again
// for the same head updates its cost and keep and keeps the instant it
// began waiting. A head whose keep is strict and which is too big to
// leave it claims nothing (it waits for its keep to change, not for
// refill) and begins waiting when it could fit.
func (l *Limiter) Claim(head any, cost Amount, keep Keep, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.buckets
	s.refresh(now)
	keep.Past = false
	c := &s.claim
	if c.head != head || s.keptOut(cost, keep) {
		*c = claim{head: head, since: now}
		for i := range s.b {
			b := &s.b[i]
			if b.capacity > 0 && cost[i] > 0 {
				full := math.Max(b.dep(), cost[i])
				c.slack[i] = math.Max(0, b.at(now, full)-math.Min(cost[i]+s.hold(Dim(i), keep), full))
			}
		}
	}
	c.cost, c.keep = cost, keep
}

// Unclaim ends the head's claim (it was admitted, or left the queue).
func (l *Limiter) Unclaim() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.claim = claim{}
}

// KeptOut reports whether cost cannot fit while leaving keep, strict, at
// all (in some bucket it is too big to leave it below a full bucket):
// only the keep changing lets it go, not refill.
func (l *Limiter) KeptOut(cost Amount, keep Keep, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	return l.buckets.keptOut(cost, keep)
}

// keptOut reports whether cost cannot fit while leaving a strict keep at
// all: in some bucket it is too big to leave it below a full bucket.
func (s *bucketSet) keptOut(cost Amount, keep Keep) bool {
	if !keep.Strict {
		return false
	}
	for i := range s.b {
		b := &s.b[i]
		if b.capacity > 0 && cost[i] > 0 && cost[i]+s.hold(Dim(i), keep) > math.Max(b.dep(), cost[i]) {
			return true
		}
	}
	return false
}

// passWait is how long until cost, admitted past the waiting head, fits
// its claim at now (0 without a claim, or while the head's strict keep
// keeps it out).
func (s *bucketSet) passWait(cost Amount, now time.Time) time.Duration {
	c := &s.claim
	if c.head == nil || s.keptOut(c.cost, c.keep) {
		return 0
	}
	el := math.Max(now.Sub(c.since).Seconds(), 0)
	var w time.Duration
	for i := range s.b {
		b := &s.b[i]
		if b.capacity == 0 || cost[i] <= 0 || c.cost[i] <= 0 || c.cost[i] > b.cp() {
			continue
		}
		if c.cost[i] > b.dep() && b.at(now, c.cost[i]) > b.dep() {
			w = max(w, StrictRecheck) // only the head can use what lies above the depth
			continue
		}
		r := BypassShare * b.rate()
		if over := c.taken[i] + cost[i] - c.slack[i] - r*el; over > 0 {
			w = max(w, secs(over/r))
		}
	}
	return w
}

// took counts a reservation against the claim, if any (a negative cost
// gives one back).
func (s *bucketSet) took(cost Amount) {
	if s.claim.head == nil {
		return
	}
	for i := range cost {
		s.claim.taken[i] = math.Max(0, s.claim.taken[i]+cost[i])
	}
}
