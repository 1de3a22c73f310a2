package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// poolKey is one provider key of the upstream's pool: its own quota
// buckets (one flow.Limiter), its 429 pause (the Limiter's), its slots
// and its place in or out of the pool. An upstream with api_key alone is a
// pool of one.
type poolKey struct {
	// cred is the key's secret and fingerprint, swapped whole by
	// RotateKeys (read without d.mu on every attempt).
	cred    atomic.Pointer[keyCred]
	lim     *flow.Limiter
	org     *orgBucket // nil: the key is its own account
	maxConc int
	// prefixes are the cacheable prefixes the key recently sent, until
	// the provider's cache lets them go (prompt_cache.go).
	prefixes *expiring[int64]

	// unanswered holds, for each admitted attempt on this key until its
	// answer's headers (or its end) came back, when it was reserved and
	// when it was sent (zero: not yet, a ticket between Acquire and
	// Call). The provider may not have charged those when it reports on
	// another request (Observe's raise), and a credit may not fill the
	// bucket over what the unsent ones reserved
	// (flow.Limiter.RefundPending).
	umu        sync.Mutex
	unanswered map[*waiter]attemptTimes
	unsent     int // entries of unanswered not sent yet

	// Guarded by Dispatcher.mu.
	inflight  int
	out       bool      // taken out of the pool
	outSince  time.Time // when it was taken out
	outReason string
	probeAt   time.Time // when an out key may be probed again
	probing   bool      // a probe request is in flight on it
	// blind is set while no quota the provider limits is configured and
	// no answer has come back yet to report them: the key then takes one
	// attempt at a time, for at most FirstAnswerWait after it was sent,
	// so a fresh upstream does not send a whole wave before the
	// provider's first rate-limit headers say how much room it has (see
	// noteAnswer). blindUntil is when that first attempt stops holding
	// the others back.
	blind      bool
	blindUntil time.Time

	requests atomic.Uint64               // attempts sent with the key
	rates    atomic.Uint64               // rate-limit (429) answers it got
	revokes  atomic.Uint64               // times it was taken out
	learned  [flow.NumDims]atomic.Uint64 // last limit the provider reported, per dimension (noteLimits)
}

// orgBucket is an account-level bucket shared by the keys of one org.
type orgBucket struct {
	name string
	lim  *flow.Limiter
}

// Fingerprint is how a key is named in headers, logs, metrics and status:
// the first 8 hex digits of its SHA-256, never the key itself.
func Fingerprint(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:4])
}

// newPool builds the key pool of cfg.
func newPool(cfg settings, now time.Time) ([]*poolKey, error) {
	orgs := map[string]*orgBucket{}
	var keys []*poolKey
	for i, k := range cfg.Keys() {
		lc := cfg.limiterConfig()
		lc.Limits = limitsOf(k.Limits)
		lim, err := flow.NewLimiter(lc, now)
		if err != nil {
			return nil, fmt.Errorf("api_keys[%d]: %w", i, err)
		}
		pk := &poolKey{lim: lim, maxConc: max(k.Limits.MaxConcurrency, 1), blind: noLimitKnown(cfg.Protocol, lc.Limits),
			prefixes: newExpiring[int64](cfg.PromptCache.Prefixes)}
		pk.cred.Store(&keyCred{secret: k.Key, fp: Fingerprint(k.Key)})
		if k.Org != "" {
			ob := orgs[k.Org]
			if ob == nil {
				oc := cfg.limiterConfig()
				oc.Limits = limitsOf(cfg.Orgs[k.Org].Limits)
				ol, err := flow.NewLimiter(oc, now)
				if err != nil {
					return nil, fmt.Errorf("orgs.%s: %w", k.Org, err)
				}
				ob = &orgBucket{name: k.Org, lim: ol}
				orgs[k.Org] = ob
			}
			pk.org = ob
		}
		keys = append(keys, pk)
	}
	return keys, nil
}

func limitsOf(l upstream.Limits) [flow.NumDims]float64 {
	return [flow.NumDims]float64{
		flow.Requests:     float64(l.RequestsPerMinute),
		flow.InputTokens:  float64(l.InputTokensPerMinute),
		flow.OutputTokens: float64(l.OutputTokensPerMinute),
		flow.Tokens:       float64(l.TokensPerMinute),
	}
}

// FirstAnswerWait bounds how long the first attempt of an upstream with
// no limits configured holds back the others while its answer's
// rate-limit headers are awaited: a long non-streamed answer (its
// headers come with its end) must not serialize the start for minutes.
const FirstAnswerWait = 2 * time.Second

// noLimitKnown reports whether none of the quotas a provider of protocol
// p limits has a limit configured in limits (all are learned from the
// provider's headers).
func noLimitKnown(p llm.Protocol, limits [flow.NumDims]float64) bool {
	dims := []flow.Dim{flow.Requests, flow.InputTokens, flow.OutputTokens}
	if p == llm.OpenAI {
		dims = []flow.Dim{flow.Requests, flow.Tokens}
	}
	for _, d := range dims {
		if limits[d] > 0 {
			return false
		}
	}
	return true
}

// usable reports whether k may take a request now: in the pool with a
// free slot (one while blind, see FirstAnswerWait), or out with its probe
// due and none in flight. d.mu held.
func (k *poolKey) usable(now time.Time) bool {
	if k.out {
		return !k.probing && !now.Before(k.probeAt)
	}
	if k.blind && k.inflight > 0 && now.Before(k.blindUntil) {
		return false
	}
	return k.inflight < k.maxConc
}

// attemptTimes is when an unanswered attempt was reserved and sent.
type attemptTimes struct{ reserved, sent time.Time }

// noteReserved records that w's attempt was reserved on k at now.
func (k *poolKey) noteReserved(w *waiter, now time.Time) {
	k.umu.Lock()
	defer k.umu.Unlock()
	if k.unanswered == nil {
		k.unanswered = map[*waiter]attemptTimes{}
	}
	if t, ok := k.unanswered[w]; !ok || !t.sent.IsZero() {
		k.unsent++
	}
	k.unanswered[w] = attemptTimes{reserved: now}
}

// sending records that w's attempt on k is sent at now.
func (k *poolKey) sending(w *waiter, now time.Time) {
	k.umu.Lock()
	defer k.umu.Unlock()
	if t, ok := k.unanswered[w]; ok && t.sent.IsZero() {
		t.sent = now
		k.unanswered[w] = t
		k.unsent--
	}
}

// answered records that w's attempt was answered (or ended); idempotent.
func (k *poolKey) answered(w *waiter) {
	k.umu.Lock()
	defer k.umu.Unlock()
	if t, ok := k.unanswered[w]; ok && t.sent.IsZero() {
		k.unsent--
	}
	delete(k.unanswered, w)
}

// oldestUnanswered is when the oldest attempt on k other than w's and
// not yet answered was reserved, the zero time when there is none: a
// report on w's attempt may not count it. Most of them reached the
// provider long before w's (they were sent seconds ago and wait for a
// slow answer), but one sent over a fresh connection, or delayed by a
// busy CPU, may arrive after it by more than the jitter allowance, and
// the raise must not count it as charged (see Limiter.Observe).
func (k *poolKey) oldestUnanswered(w *waiter) time.Time {
	k.umu.Lock()
	defer k.umu.Unlock()
	var o time.Time
	for x, t := range k.unanswered {
		if x != w && (o.IsZero() || t.reserved.Before(o)) {
			o = t.reserved
		}
	}
	return o
}

// oldestUnsent is when the oldest attempt on k reserved and not sent yet
// was reserved, now when there is none.
func (k *poolKey) oldestUnsent(now time.Time) time.Time {
	k.umu.Lock()
	defer k.umu.Unlock()
	o := now
	if k.unsent == 0 {
		return o // the common case: Do sends what it reserves at once
	}
	for _, t := range k.unanswered {
		if t.sent.IsZero() && t.reserved.Before(o) {
			o = t.reserved
		}
	}
	return o
}

// room is how long until cost fits k and its org while leaving keep, and
// the room left after it when it fits now.
func (k *poolKey) room(cost flow.Amount, keep flow.Keep, now time.Time) (time.Duration, float64, error) {
	w, r, err := k.lim.Room(cost, keep, now)
	if err != nil || k.org == nil {
		return w, r, err
	}
	ow, or, err := k.org.lim.Room(cost, keep, now)
	if err != nil {
		return 0, 0, err
	}
	return max(w, ow), math.Min(r, or), nil
}

// reserve debits cost from k and its org; false (nothing debited) when it
// does not fit now.
func (k *poolKey) reserve(cost flow.Amount, keep flow.Keep, now time.Time) bool {
	if w, err := k.lim.ReserveKeeping(cost, keep, now); err != nil || w > 0 {
		return false
	}
	if k.org != nil {
		if w, err := k.org.lim.ReserveKeeping(cost, keep, now); err != nil || w > 0 {
			k.lim.Unreserve(cost, now)
			return false
		}
	}
	return true
}

// refund gives amount back to k and its org.
func (k *poolKey) refund(amount flow.Amount, now time.Time) {
	unsent := k.oldestUnsent(now)
	k.lim.RefundPending(amount, unsent, now)
	if k.org != nil {
		k.org.lim.RefundPending(amount, unsent, now)
	}
}

// withdraw gives back amount of w's reservation on k and its org before
// its attempt is sent (a ticket whose request costs less than it
// reserved): the provider will never charge it, so it leaves the debits
// the rate-limit reports are compared with (flow.Limiter.Withdraw). A
// reservation k does not know (none noted for w) is refunded.
func (k *poolKey) withdraw(w *waiter, amount flow.Amount, now time.Time) {
	k.umu.Lock()
	t, ok := k.unanswered[w]
	k.umu.Unlock()
	if !ok || !t.sent.IsZero() {
		k.refund(amount, now)
		return
	}
	k.withdrawAt(amount, t.reserved, now)
}

// withdrawAt is withdraw of a reservation debited at reserved.
func (k *poolKey) withdrawAt(amount flow.Amount, reserved, now time.Time) {
	unsent := k.oldestUnsent(now)
	k.lim.Withdraw(amount, reserved, unsent, now)
	if k.org != nil {
		k.org.lim.Withdraw(amount, reserved, unsent, now)
	}
}

// reconcile corrects k's and its org's reservation of an answered request
// with its reported usage (flow.Limiter.Reconcile).
func (k *poolKey) reconcile(reserved, actual flow.Amount, now time.Time) {
	unsent := k.oldestUnsent(now)
	k.lim.ReconcilePending(reserved, actual, unsent, now)
	if k.org != nil {
		k.org.lim.ReconcilePending(reserved, actual, unsent, now)
	}
}

// poolRate is the refill rate per second of the keys in the pool, per
// dimension (0 for a dimension none of them limits). d.mu held.
func (d *Dispatcher) poolRate(now time.Time) flow.Amount {
	var r flow.Amount
	for _, k := range d.keys {
		if !k.out {
			r = r.Add(k.lim.Supply(now).Rate)
		}
	}
	return r
}

// pick chooses the key for w leaving keep and reserves what it costs
// there (costOn: its estimate, less the prefix the key holds in its
// cache), setting w.cost to it. Among the usable keys it takes the key w
// is affine to (its session's, or the one holding its prefix: affine)
// when that key has room now; when it has not but another has, a
// session's request waits for its key if the key can admit it before its
// deadline (its buckets refilled; a key out of the pool or without a free
// slot cannot say when); otherwise pick takes the key whose buckets (its
// own and its org's) leave the most room. When none fits now it returns nil and how
// long until the earliest could (0: until woken, by a completion).
// ErrTooLarge when no key can ever take it. A request continuing a
// Response (w.pin) considers only the key that created it. d.mu held.
func (d *Dispatcher) pick(w *waiter, keep flow.Keep, now time.Time) (*poolKey, time.Duration, error) {
	var best *poolKey
	var bestCost flow.Amount
	bestRoom := math.Inf(-1)
	wait := time.Duration(math.MaxInt64)
	var tooLarge error
	aff, affHold := d.affine(w, now)
	affinity := d.cfg.PromptCache.On(d.cfg.PromptCache.Affinity)
	spread := aff == nil && w.cache.session != ""
	affWait := time.Duration(-1) // how long until aff fits; -1: it cannot say
	var affCost flow.Amount
	affFits := false
	// An org's room is the same for each of its keys when their costs
	// agree: asked once.
	var orgs [4]struct {
		o   *orgBucket
		w   time.Duration
		r   float64
		err error
	}
	nOrgs := 0
	for _, k := range d.keys {
		if w.pin != nil && k != w.pin {
			continue // only the key that created the response continues it
		}
		if !k.usable(now) {
			if k.out && !k.probing {
				wait = min(wait, max(k.probeAt.Sub(now), time.Nanosecond))
			} else if k.blind && k.inflight < k.maxConc {
				wait = min(wait, max(k.blindUntil.Sub(now), time.Nanosecond))
			}
			continue
		}
		cost := d.costOn(k, w, now)
		wk, r, err := k.lim.Room(cost, keep, now)
		if o := k.org; o != nil && err == nil {
			if cost != w.full {
				ow, or, oerr := o.lim.Room(cost, keep, now)
				wk, r, err = max(wk, ow), math.Min(r, or), oerr
			} else {
				i := 0
				for i < nOrgs && orgs[i].o != o {
					i++
				}
				if i == nOrgs {
					if i == len(orgs) {
						i = 0 // more orgs than the cache holds: ask again
					} else {
						nOrgs++
					}
					orgs[i].o = o
					orgs[i].w, orgs[i].r, orgs[i].err = o.lim.Room(cost, keep, now)
				}
				wk, r, err = max(wk, orgs[i].w), math.Min(r, orgs[i].r), orgs[i].err
			}
		}
		if k == aff && err == nil && !k.out {
			affWait, affCost, affFits = wk, cost, wk == 0
		}
		if err == nil && wk == 0 && cost != w.full && (!affinity || spread) {
			// Without affinity, and for a session's first request, the
			// keys are ranked as for any request: a key's cache does not
			// draw the request to it, so sessions spread over the pool.
			if _, rf, ferr := k.lim.Room(w.full, keep, now); ferr == nil {
				r = rf
			}
		}
		switch {
		case err != nil:
			tooLarge = err
		case wk > 0:
			wait = min(wait, wk)
		case best == nil || r > bestRoom:
			best, bestRoom, bestCost = k, r, cost
		}
	}
	switch {
	case affFits:
		best, bestCost = aff, affCost
	case affHold && best != nil && affWait > 0 && !now.Add(affWait).After(w.deadline):
		// Its session's key will have room before its deadline: it
		// waits for it rather than writing its prefix again on another.
		return nil, affWait, nil
	}
	if best != nil && best.reserve(bestCost, keep, now) {
		if best.out {
			best.probing = true
		}
		if best.blind && best.inflight == 0 {
			best.blindUntil = now.Add(FirstAnswerWait)
		}
		w.cost = bestCost
		return best, 0, nil
	}
	if best != nil {
		return nil, time.Nanosecond, nil // moved under us (a ticket's extra): look again
	}
	if wait == time.Duration(math.MaxInt64) {
		if tooLarge != nil && d.allTooLarge(w.full, now) {
			return nil, 0, tooLarge
		}
		return nil, 0, nil
	}
	return nil, wait, nil
}

// allTooLarge reports whether cost exceeds a bucket's capacity on every
// key.
func (d *Dispatcher) allTooLarge(cost flow.Amount, now time.Time) bool {
	return d.tooLarge(cost, now) != nil
}

// tooLarge returns ErrTooLarge's error when no key of the pool can ever
// take cost.
func (d *Dispatcher) tooLarge(cost flow.Amount, now time.Time) error {
	var last error
	for _, k := range d.keys {
		_, err := k.lim.TimeUntil(cost, now)
		if err == nil && k.org != nil {
			_, err = k.org.lim.TimeUntil(cost, now)
		}
		if !errors.Is(err, flow.ErrTooLarge) {
			return nil
		}
		last = err
	}
	return last
}

// predictWait predicts how long until demand has been refilled across the
// pool: the keys in the pool pooled, each org giving at most its own
// bucket's supply. For a pool of one it is its Limiter's WaitFor.
func (d *Dispatcher) predictWait(demand flow.Amount, now time.Time) time.Duration {
	if len(d.keys) == 1 && d.keys[0].org == nil {
		return d.keys[0].lim.WaitFor(demand, now)
	}
	var level, rate flow.Amount
	var unlimited [flow.NumDims]bool
	paused := time.Duration(math.MaxInt64)
	orgSum := map[*orgBucket]*flow.Supply{}
	add := func(s flow.Supply) {
		for i := range level {
			if s.Rate[i] == 0 {
				unlimited[i] = true
				continue
			}
			level[i] += s.Level[i]
			rate[i] += s.Rate[i]
		}
	}
	for _, k := range d.keys {
		if k.out {
			continue
		}
		s := k.lim.Supply(now)
		until := s.PausedUntil
		if k.org != nil {
			until = maxTime(until, k.org.lim.PausedUntil())
		}
		paused = min(paused, max(until.Sub(now), 0))
		if k.org == nil {
			add(s)
			continue
		}
		sum := orgSum[k.org]
		if sum == nil {
			sum = &flow.Supply{}
			orgSum[k.org] = sum
		}
		for i := range sum.Level {
			if s.Rate[i] == 0 || sum.Rate[i] < 0 {
				sum.Rate[i] = -1 // unlimited
				continue
			}
			sum.Level[i] += s.Level[i]
			sum.Rate[i] += s.Rate[i]
		}
	}
	for o, sum := range orgSum {
		os := o.lim.Supply(now)
		var g flow.Supply
		for i := range g.Level {
			switch {
			case sum.Rate[i] < 0:
				g.Level[i], g.Rate[i] = os.Level[i], os.Rate[i]
			case os.Rate[i] == 0:
				g.Level[i], g.Rate[i] = sum.Level[i], sum.Rate[i]
			default:
				g.Level[i], g.Rate[i] = math.Min(sum.Level[i], os.Level[i]), math.Min(sum.Rate[i], os.Rate[i])
			}
		}
		add(g)
	}
	if paused == time.Duration(math.MaxInt64) {
		paused = 0
	}
	var w time.Duration
	for i := range level {
		if unlimited[i] || rate[i] <= 0 || demand[i] <= 0 || level[i] >= demand[i] {
			continue
		}
		w = max(w, time.Duration(math.Ceil((demand[i]-level[i])/rate[i]*float64(time.Second))))
	}
	return max(w, paused)
}

// keyRevoked reports whether an answer says the key itself cannot be used
// (provider.KeyRevoked: 401, 403, out of credit, over its spend cap,
// access terminated).
func keyRevoked(o llm.Outcome) bool { return provider.KeyRevoked(o) }

// noteAnswer records what an answer says about its key: a revoked key is
// taken out of the pool, the last one in included (the upstream is then
// unavailable until a probe brings one back, keysOut), and only its own
// probe's answer brings a key back in. It returns true when the request
// should go back in line for another key (or the next probe) without
// burning an attempt: a key's rejection is the upstream's problem, never
// the client's. A transport error (answered false) says nothing.
func (d *Dispatcher) noteAnswer(k *poolKey, o llm.Outcome, answered, keyProbe bool, now time.Time) bool {
	if k == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if keyProbe {
		k.probing = false
	}
	if !answered {
		if keyProbe && k.out {
			k.probeAt = now.Add(d.cfg.KeyProbeInterval) // no answer: probed again later
		}
		return false
	}
	if k.blind {
		// The first answer's headers (Observe ran before this) set the
		// limits the provider reports; one without them never will.
		k.blind = false
		d.kickLocked()
	}
	if o.Kind == llm.Rate {
		k.rates.Add(1)
	}
	if !keyRevoked(o) {
		if k.out && keyProbe {
			// Only its probe brings a key back: an answer to a request
			// sent before it was taken out says nothing of it now.
			k.out = false
			d.cfg.States.KeyBack(k.cred.Load().fp, now.Sub(k.outSince))
			d.kickLocked()
		}
		return false
	}
	if k.out {
		// A failed probe, or an answer to a request admitted before it
		// was taken out: stays out, probed again later.
		if keyProbe {
			k.probeAt = now.Add(d.cfg.KeyProbeInterval)
		}
		return true
	}
	k.out, k.outSince, k.probeAt = true, now, now.Add(d.cfg.KeyProbeInterval)
	k.outReason = describe(o)
	k.revokes.Add(1)
	d.cfg.States.KeyOut(k.cred.Load().fp, k.outReason, d.cfg.KeyProbeInterval)
	return true
}

// keysOut reports whether every key of the pool is out (the upstream is
// unavailable until one returns) and when the earliest due may be probed
// (zero while a probe is in flight: its answer decides). d.mu held.
func (d *Dispatcher) keysOut() (bool, time.Time) {
	var next time.Time
	for _, k := range d.keys {
		if !k.out {
			return false, time.Time{}
		}
		if k.probing {
			return true, time.Time{}
		}
		if next.IsZero() || k.probeAt.Before(next) {
			next = k.probeAt
		}
	}
	return true, next
}

// keysOutCause names why every key is out, for an outage's message: the
// latest rejection and since when the pool has been empty. d.mu held.
func (d *Dispatcher) keysOutCause() (reason string, since time.Time) {
	for _, k := range d.keys {
		if k.outSince.After(since) {
			reason, since = k.outReason, k.outSince
		}
	}
	return reason, since
}

func (d *Dispatcher) kickLocked() {
	d.kicks.Add(1)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// KeyState is one key of the pool for operators and metrics.
type KeyState struct {
	// Fingerprint names the key (Fingerprint).
	Fingerprint string
	// Org is the key's org ("" for none).
	Org string
	// InFlight is how many requests use the key now; MaxConcurrency its
	// slots.
	InFlight, MaxConcurrency int
	// Buckets are the key's own quota buckets.
	Buckets [flow.NumDims]flow.BucketState
	// OrgBuckets are its org's (zero without an org).
	OrgBuckets [flow.NumDims]flow.BucketState
	// PausedUntil is the end of the key's 429 pause (zero or past: none).
	PausedUntil time.Time
	// Out is set while the key is taken out of the pool; OutSince,
	// OutReason and ProbeAt say since when, why and when it is probed.
	Out       bool
	OutSince  time.Time
	OutReason string
	ProbeAt   time.Time
	// Requests, RateLimited and Revoked count attempts sent with the key,
	// 429 answers and times it was taken out.
	Requests, RateLimited, Revoked uint64
}

// keyStates returns the pool's state. d.mu held.
func (d *Dispatcher) keyStates(now time.Time) []KeyState {
	out := make([]KeyState, len(d.keys))
	for i, k := range d.keys {
		s := KeyState{Fingerprint: k.cred.Load().fp, InFlight: k.inflight, MaxConcurrency: k.maxConc,
			Buckets: k.lim.State(now), PausedUntil: k.lim.PausedUntil(),
			Out: k.out, OutSince: k.outSince, OutReason: k.outReason, ProbeAt: k.probeAt,
			Requests: k.requests.Load(), RateLimited: k.rates.Load(), Revoked: k.revokes.Load()}
		if k.org != nil {
			s.Org, s.OrgBuckets = k.org.name, k.org.lim.State(now)
		}
		out[i] = s
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// unpick gives back a reservation pick made for a request that is not
// sent after all. d.mu held.
func (d *Dispatcher) unpick(k *poolKey, cost flow.Amount, now time.Time) {
	k.refund(cost, now)
	if k.out {
		k.probing = false
	}
}

// pause stops k until until after a 429; a key of an org pauses the org
// too (the 429 may be the account's, and its other keys would meet it).
func (k *poolKey) pause(until, now time.Time) {
	k.lim.Pause(until, now)
	if k.org != nil {
		k.org.lim.Pause(until, now)
	}
}

// PassOutage is the answer to a request the engine does not schedule
// (models, files, count_tokens: a pass-through) while the provider rejects
// every key of the pool (keysOut): ErrUnavailable in the protocol's outage
// shape naming the cause, as a scheduled request gets (describeOutage),
// never the provider's 401/403 sent with a key known to be rejected. It is
// nil while a key is in. A pass-through is no key's probe: a key comes back
// only through its probe (a scheduled request or a job).
func (d *Dispatcher) PassOutage() *Error {
	d.mu.Lock()
	out, _ := d.keysOut()
	d.mu.Unlock()
	if !out {
		return nil
	}
	e := &Error{Reason: ErrUnavailable}
	d.describeOutage(e, d.clk.Now(), 0)
	e.Type = errorTypeFor(d.cfg.Protocol, e.Status)
	return e
}

// PassKey returns the key requests the engine does not schedule (models,
// count_tokens, files) are sent with: the first key in the pool, else (a
// key came back or went out since PassOutage was asked) the first key.
func (d *Dispatcher) PassKey() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range d.keys {
		if !k.out {
			return k.cred.Load().secret
		}
	}
	return d.keys[0].cred.Load().secret
}

// PredictWait predicts how long a request of cost and class from client
// arriving now would wait for admission: the demand queued ahead of it
// (the more urgent classes, and its class's round robin:
// flow.Scheduler.DemandAhead) plus its own cost, refilled across the pool, and
// at least until an open breaker's next probe. unavailable is true while
// the breaker refuses calls. It is what Do sheds on, for a router choosing
// between upstreams; cheap (one pass under the lock).
func (d *Dispatcher) PredictWait(cost provider.Cost, class llm.Priority, client string) (wait time.Duration, unavailable bool) {
	if !class.Valid() {
		class = llm.Normal
	}
	now := d.clk.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	wait = d.predictWait(d.sched.DemandAhead(class, client).Add(flow.NewAmount(cost.InputTokens, cost.OutputTokens)), now)
	if ok, readyAt := d.brk.Ready(now); !ok {
		return max(wait, readyAt.Sub(now)), true
	}
	return wait, false
}

// keyCred is one key's secret and its Fingerprint.
type keyCred struct {
	secret string
	fp     string
}

// RotateKeys replaces the secrets of the pool's keys, in order, without
// dropping a request: attempts already sent keep the secret they were sent
// with, the next ones take the new one. A key whose secret changed is put
// back in the pool (a revoked key replaced by a fresh one). The pool keeps
// its size and its limits: adding or removing keys needs a restart.
func (d *Dispatcher) RotateKeys(secrets []string) error {
	if len(secrets) != len(d.keys) {
		return fmt.Errorf("the pool has %d keys and the new config %d: adding or removing keys needs a restart", len(d.keys), len(secrets))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, k := range d.keys {
		if k.cred.Load().secret == secrets[i] {
			continue
		}
		k.cred.Store(&keyCred{secret: secrets[i], fp: Fingerprint(secrets[i])})
		k.out, k.outReason, k.probing = false, "", false
	}
	return nil
}
