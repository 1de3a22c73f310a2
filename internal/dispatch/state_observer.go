package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// StateObserver receives an upstream's state changes, each once, when it
// happens (not once per request that meets the state): the breaker
// opening or closing, a key paused by a 429, quota limits learned from
// response headers, a key of the pool taken out or back in. The server
// logs them; the upstream's name is the Observer's to know. Every method
// must be cheap and never block on the request path: some are called
// while the dispatcher holds its lock. Keys are named by their
// fingerprint (Fingerprint), never by the secret. Embed NopStateObserver
// to implement only some.
type StateObserver interface {
	// BreakerChanged: the circuit breaker moved from one state to another.
	BreakerChanged(from, to flow.BreakerState)
	// Paused: a 429 paused key until until; hinted tells whether the
	// provider gave the pause (retry-after or a bucket's reset) or the
	// backoff chose it. Called when a pause starts, not when a later 429
	// extends a pause already running.
	Paused(key string, until time.Time, pause time.Duration, hinted bool)
	// LimitsLearned: the provider's headers gave key a limit in dim it
	// had not reported before (or a different one).
	LimitsLearned(key string, dim flow.Dim, limit float64)
	// KeyOut: key was taken out of the pool for reason; it is probed
	// again after probeIn.
	KeyOut(key, reason string, probeIn time.Duration)
	// KeyBack: key is back in the pool after outFor.
	KeyBack(key string, outFor time.Duration)
}

// NopStateObserver ignores every state change.
type NopStateObserver struct{}

func (NopStateObserver) BreakerChanged(flow.BreakerState, flow.BreakerState) {}
func (NopStateObserver) Paused(string, time.Time, time.Duration, bool)       {}
func (NopStateObserver) LimitsLearned(string, flow.Dim, float64)             {}
func (NopStateObserver) KeyOut(string, string, time.Duration)                {}
func (NopStateObserver) KeyBack(string, time.Duration)                       {}

// noteLimits tells the StateObserver about every limit in obs that k has
// not reported before: one compare-and-swap per dimension, so concurrent
// answers carrying the same new limit report it once.
func (d *Dispatcher) noteLimits(k *poolKey, obs map[flow.Dim]flow.Observation) {
	for dim, o := range obs {
		if o.Limit <= 0 || dim < 0 || dim >= flow.NumDims {
			continue
		}
		v := uint64(o.Limit)
		old := k.learned[dim].Load()
		if old == v || !k.learned[dim].CompareAndSwap(old, v) {
			continue
		}
		d.cfg.States.LimitsLearned(k.cred.Load().fp, dim, o.Limit)
	}
}

// pauseKey pauses k until until after a 429 and reports the pause when it
// starts one (k was not paused already).
func (d *Dispatcher) pauseKey(k *poolKey, until, now time.Time, hinted bool) {
	running := k.lim.PausedUntil().After(now)
	k.pause(until, now)
	if !running {
		d.cfg.States.Paused(k.cred.Load().fp, until, until.Sub(now), hinted)
	}
}
