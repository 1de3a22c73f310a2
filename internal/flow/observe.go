package flow

import (
	"math"
	"time"
)

// Observation is the provider's report of one dimension.
type Observation struct {
	// Limit is the provider's per-minute limit; <= 0 when not reported.
	Limit float64
	// Remaining is the level the provider reports; < 0 when not reported.
	Remaining float64
	// Precision is how much Remaining may exceed the provider's level
	// (Anthropic rounds token remaining to the nearest thousand: 500).
	// Lowering the view uses Remaining as it is; raising it (the depth
	// and the level) uses Remaining − Precision.
	Precision float64
	// Reset is when the provider says its bucket is full again; zero
	// when not reported. Informational (shared with a cluster, shown).
	Reset time.Time
}

// Mark is the Limiter's account at one instant, taken when a request is
// sent (Limiter.Mark) and given back to Observe with that request's
// rate-limit headers, so the provider's report can be compared with the
// buckets as they were when it was made. The zero Mark means unknown.
type Mark struct {
	at      time.Time
	debited Amount
	from    time.Time // see From
}

// From returns m noting that requests reserved since t (t included) may
// not have reached the provider before the request m was taken for (they
// were not answered yet when it was sent): Observe's raise subtracts
// everything debited since t, or since the mark less the jitter allowance
// if that is earlier. The zero t adds nothing.
func (m Mark) From(t time.Time) Mark {
	m.from = t
	return m
}

// Mark returns the account at now.
func (l *Limiter) Mark(now time.Time) Mark {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.est.mark(now)
}

// Observe applies the provider's rate-limit report, made in the answer to
// the request sent at since (the Mark taken when it was sent; the zero
// Mark if unknown):
//
//   - a limit not configured, or lower than the configured one, is
//     learned (times the safety margin);
//   - each level is clamped to the reported remaining brought forward to
//     now: plus the refill since the provider charged the request, less
//     what was reserved since, plus the output answers gave back since;
//     without a Mark, to the remaining as reported. Sluice never assumes
//     more room than the provider has;
//   - a remaining deeper than a bucket deepens it, and a level below what
//     the provider surely holds less everything reserved that it may not
//     have counted (Mark.From) is raised to that. A cluster node holding
//     a share of the bucket, or a Limiter whose debit history no longer
//     reaches back to the Mark, raises nothing.
//
// Only Reconcile's credits are counted as given back: a failed attempt's
// refund may never have been charged. docs/engine.md ("Observe") derives
// each term and its slack.
func (l *Limiter) Observe(obs map[Dim]Observation, since Mark, now time.Time) {
	l.observe(obs, since, now, true)
}

// Clamp is Observe for a report that may describe another bucket than
// this Limiter's (an org's account-level Limiter fed a key's headers):
// limits are learned and levels lowered, but nothing is deepened or
// raised.
func (l *Limiter) Clamp(obs map[Dim]Observation, since Mark, now time.Time) {
	l.observe(obs, since, now, false)
}

func (l *Limiter) observe(obs map[Dim]Observation, since Mark, now time.Time, raise bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buckets.refresh(now)
	for d, o := range obs {
		if d < 0 || d >= NumDims {
			continue
		}
		b := &l.buckets.b[d]
		if o.Limit > 0 || o.Remaining >= 0 {
			l.est.note(d, o, now)
			l.cluster.heard[d].note(o, since.at, now)
		}
		if o.Limit > 0 {
			l.buckets.learn(d, o.Limit, now)
		}
		if b.capacity == 0 || o.Remaining < 0 {
			continue
		}
		b.settle(now)
		sure := math.Max(o.Remaining-max(o.Precision, 0), 0) // what the provider surely holds
		b.seen = math.Max(b.seen, sure)
		if raise {
			l.buckets.deepen(d, sure)
		}
		if since.at.IsZero() {
			b.level = math.Min(b.level, o.Remaining)
			continue
		}
		remaining := l.est.broughtForward(d, o.Remaining, b.rate(), since, now)
		lvl := b.at(now, b.dep())
		// A cluster node holds a share of the bucket the report is about:
		// the other nodes' debits are not ours to subtract, so no raise.
		if raise && b.part() == 1 {
			if to, ok := l.est.raiseTo(d, sure, b.dep(), since); ok && to > lvl {
				b.level = to
			}
		}
		b.level = math.Min(b.level, remaining)
	}
}

// estimator is the Limiter's account of what the buckets gave out, kept to
// compare the provider's reports with: the running sums of every debit and
// of the output answers gave back (Reconcile), each with its recent
// history, so what happened between a request's send and now can be told
// apart from what happened before; and the provider's latest report per
// dimension. It knows nothing of the buckets: Observe hands it their rate
// and depth. Not safe for concurrent use: the Limiter holds its mutex
// around every call.
type estimator struct {
	allowance time.Duration // the jitter allowance, >= 0
	// debited is the running sum, per dimension, of every debit (Reserve,
	// and a Refund or Reconcile that takes more) since the Limiter was
	// made, in every dimension whether limited or not: the difference
	// between two Marks is what was taken from the buckets in between.
	// Credits are not counted (see Observe). hist is its recent history.
	debited Amount
	hist    history
	// credited is the running sum of the output tokens answered requests
	// did not use (Reconcile), in the OutputTokens and Tokens dimensions:
	// what the provider gave back when each answered. credHist is its
	// recent history, for Observe's clamp.
	credited Amount
	credHist history
	// withdrawn are debits taken back before their requests were sent
	// (Limiter.Withdraw): the instant each was debited and what was taken
	// back, the latest historyLen of them. The provider never charges
	// them, so what was debited after an instant leaves them out; one
	// forgotten counts its debit whole (the safe side).
	withdrawn []withdrawal
	// reported is the provider's last report per dimension (Observe),
	// reportedAt when it came: the provider's view beside ours.
	reported   [NumDims]Observation
	reportedAt [NumDims]time.Time
}

func (e *estimator) mark(now time.Time) Mark { return Mark{at: now, debited: e.debited} }

// debit counts a debit of a at now.
func (e *estimator) debit(a Amount, now time.Time) {
	e.debited = e.debited.Add(a)
	e.hist.record(now, e.debited)
}

// giveBack counts output tokens an answer did not use, given back at now.
func (e *estimator) giveBack(out float64, now time.Time) {
	e.credited[OutputTokens] += out
	e.credited[Tokens] += out
	e.credHist.record(now, e.credited)
}

// withdrawal is a debit made at at, a part of which (amount) was taken
// back before its request was sent.
type withdrawal struct {
	at     time.Time
	amount Amount
}

// withdraw counts amount taken back from a debit made at at.
func (e *estimator) withdraw(amount Amount, at time.Time) {
	if len(e.withdrawn) == historyLen {
		e.withdrawn = append(e.withdrawn[:0], e.withdrawn[1:]...)
	}
	e.withdrawn = append(e.withdrawn, withdrawal{at: at, amount: amount})
}

// withdrawnAfter is what was taken back from the debits made after t.
func (e *estimator) withdrawnAfter(t time.Time) Amount {
	var a Amount
	for _, w := range e.withdrawn {
		if w.at.After(t) {
			a = a.Add(w.amount)
		}
	}
	return a
}

// note keeps o as the provider's latest report of d.
func (e *estimator) note(d Dim, o Observation, now time.Time) {
	e.reported[d], e.reportedAt[d] = o, now
}

// debitedSince is what was debited after t, less what was withdrawn from
// those debits; ok is false when the history no longer reaches back to t.
func (e *estimator) debitedSince(t time.Time) (Amount, bool) {
	before, ok := e.hist.before(t)
	if !ok {
		return Amount{}, false
	}
	return e.debited.Sub(before).Sub(e.withdrawnAfter(t)), true
}

// unsent is what a credit at now must leave room for: what was debited
// since the earlier of unsent and one jitter allowance ago, as those
// requests may not have reached the provider yet (RefundPending).
func (e *estimator) unsent(unsent, now time.Time) (Amount, bool) {
	from := now.Add(-e.allowance)
	if unsent.Before(from) {
		from = unsent.Add(-time.Nanosecond)
	}
	return e.debitedSince(from)
}

// creditedSince is what Reconcile gave back in dimension d after t. When
// the history no longer reaches back to t, nothing (the clamp then stays
// conservative).
func (e *estimator) creditedSince(d Dim, t time.Time) float64 {
	before, ok := e.credHist.before(t)
	if !ok {
		return 0
	}
	return e.credited[d] - before[d]
}

// broughtForward is the remaining R the provider reported of d, in the
// answer to the request marked since, brought to now for a bucket that
// refills at rate (docs/engine.md, "Observe"):
//
//	R' = R + rate·(now − since − allowance) − (debited since since + allowance)
//	       + (output given back since since + 2·allowance)
func (e *estimator) broughtForward(d Dim, remaining, rate float64, since Mark, now time.Time) float64 {
	// The provider charged the request up to a jitter allowance after we
	// sent it: credit the refill from then on only.
	dt := math.Max(now.Sub(since.at).Seconds()-e.allowance.Seconds(), 0)
	refill := rate * dt
	// What was reserved from then on is surely not in R; what was
	// reserved in between may be, and is left to our own buckets (they
	// hold it already). What was withdrawn from those debits will never
	// be charged (a withdrawal from a debit at the mark's instant is
	// counted as before the mark: the safe side).
	taken := e.debited[d] - since.debited[d] - e.withdrawnAfter(since.at)[d]
	if e.allowance > 0 {
		t := since.at.Add(e.allowance - time.Nanosecond)
		if before, ok := e.hist.before(t); ok {
			taken = e.debited[d] - before[d] - e.withdrawnAfter(t)[d]
		}
	}
	return remaining + (refill - taken + e.creditedSince(d, since.at.Add(2*e.allowance)))
}

// raiseTo is the level the report shows the provider surely holds in d,
// for a bucket of depth: what it surely held (sure), capped at the
// depth, less everything debited since the lookback (the mark less the
// allowance, or since.from if earlier: what the report may not count)
// (docs/engine.md, "Observe"):
//
//	R'' = min(R − precision, depth) − (debited since the lookback, less
//	      what was withdrawn from those debits)
//
// No refill is credited: the provider charged the request at some instant
// before its answer, maybe well after we sent it. ok is false when the
// history no longer reaches back to the lookback.
func (e *estimator) raiseTo(d Dim, sure, depth float64, since Mark) (float64, bool) {
	lookback := since.at.Add(-e.allowance)
	if !since.from.IsZero() && !since.from.After(lookback) {
		lookback = since.from.Add(-time.Nanosecond) // its own debit is not charged
	}
	before, ok := e.hist.before(lookback)
	if !ok {
		return 0, false
	}
	return math.Min(sure, depth) - (e.debited[d] - before[d] - e.withdrawnAfter(lookback)[d]), true
}

// historyLen is how many recent entries a history keeps.
const historyLen = 256

// history is a ring of (instant, running sum) after each change of a
// running sum (the debits, or the credits), so that what it was before
// an instant can be read.
type history struct {
	at  [historyLen]time.Time
	sum [historyLen]Amount
	n   int // entries recorded, ever
}

func (h *history) record(now time.Time, sum Amount) {
	i := h.n % historyLen
	h.at[i], h.sum[i] = now, sum
	h.n++
}

// before returns the sum as of t (the last entry at or before t); ok is
// false when the ring no longer reaches back to t.
func (h *history) before(t time.Time) (Amount, bool) {
	for k := 1; k <= min(h.n, historyLen); k++ {
		i := (h.n - k) % historyLen
		if !h.at[i].After(t) {
			return h.sum[i], true
		}
	}
	if h.n <= historyLen {
		return Amount{}, true // before the first entry: nothing yet
	}
	return Amount{}, false
}
