package flow

import (
	"fmt"
	"math"
	"sync"
)

// BackoffRatioDefault is the multiplicative decrease on an overload signal
// (Netflix AIMDLimit uses 0.9).
const BackoffRatioDefault = 0.9

// AIMD is an adaptive concurrency limit: additive increase (+1) on a
// success while the limit is utilised (in flight ≥ half the limit), and
// multiplicative decrease on an overload signal, between a floor and a cap
// (Netflix concurrency-limits AIMDLimit). It is safe for concurrent use.
type AIMD struct {
	mu       sync.Mutex
	min, max int
	ratio    float64
	limit    float64
	share    int // a cluster's slot share (SetShare), when capped
	capped   bool
}

// NewAIMD returns an AIMD limit starting at max. ratio in [0.5, 1) is the
// decrease factor; 0 means BackoffRatioDefault.
func NewAIMD(minLimit, maxLimit int, ratio float64) (*AIMD, error) {
	if ratio == 0 {
		ratio = BackoffRatioDefault
	}
	switch {
	case minLimit < 1:
		return nil, fmt.Errorf("MinConcurrency must be >= 1, got %d", minLimit)
	case maxLimit < minLimit:
		return nil, fmt.Errorf("MaxConcurrency (%d) must be >= MinConcurrency (%d)", maxLimit, minLimit)
	case ratio < 0.5 || ratio >= 1:
		return nil, fmt.Errorf("backoff ratio must be in [0.5, 1), got %v", ratio)
	}
	return &AIMD{min: minLimit, max: maxLimit, ratio: ratio, limit: float64(maxLimit)}, nil
}

// Limit returns the current concurrency limit.
func (a *AIMD) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.capped && a.share < int(a.limit) {
		return a.share
	}
	return int(a.limit)
}

// SetShare caps Limit at n slots: this node's share of a cluster-wide
// max_concurrency (internal/cluster); 0 admits nothing new. n < 0
// removes the cap. The adaptive limit goes on moving underneath.
func (a *AIMD) SetShare(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.share, a.capped = n, n >= 0
}

// OnSuccess records a success seen with inflight requests in flight
// (counting this one).
func (a *AIMD) OnSuccess(inflight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if float64(inflight)*2 >= a.limit {
		a.limit = math.Min(float64(a.max), a.limit+1)
	}
}

// OnOverload records an overload signal (529, 503, timeout).
func (a *AIMD) OnOverload() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = math.Max(float64(a.min), math.Floor(a.limit*a.ratio))
}
