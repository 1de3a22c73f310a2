package admit

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/provider"
)

// Gate is one (client, upstream) pair's own limits: token buckets for its
// requests and tokens per minute (a flow.Limiter, the engine that mirrors
// the providers' quotas) and its concurrency slots. It implements
// dispatch.Gate: the upstream's dispatcher checks it in its admission
// step for live requests, and a job's call takes it directly
// (Layer.AdmitNow). Safe for concurrent use.
type Gate struct {
	client, upstream string
	values           LimitValues
	lim              *flow.Limiter // nil without a rate limit
	slots            *slots        // nil without a concurrency limit

	mu       sync.Mutex
	nextTurn time.Time   // the next free turn of a job held back (turn)
	refused  flow.Amount // running sum of the costs held back (demand, share.go)
}

var _ dispatch.Gate = (*Gate)(nil)

// amount is what a request of cost charges a gate: one request, and its
// input estimate plus max_tokens.
func amount(cost provider.Cost) flow.Amount {
	var a flow.Amount
	a[flow.Requests], a[flow.Tokens] = 1, float64(cost.InputTokens+cost.OutputTokens)
	return a
}

// name is how the gate's limits are named in messages.
func (g *Gate) name(limit string) string {
	return fmt.Sprintf("client %s's %s on %s", g.client, limit, g.upstream)
}

// Take implements dispatch.Gate.
func (g *Gate) Take(cost provider.Cost, now time.Time) (dispatch.GateWait, error) {
	a := amount(cost)
	if g.lim != nil {
		wait, err := g.lim.Reserve(a, now)
		if errors.Is(err, flow.ErrTooLarge) {
			return dispatch.GateWait{}, &dispatch.Error{Reason: dispatch.ErrTooLarge, Status: http.StatusBadRequest, Type: "invalid_request_error",
				Message: fmt.Sprintf("the request's %.0f tokens (its input estimate plus max_tokens) exceed %s: lower max_tokens",
					a[flow.Tokens], g.name(fmt.Sprintf("tokens_per_minute (%g)", g.values.TokensPerMinute)))}
		}
		if err != nil {
			return dispatch.GateWait{}, fmt.Errorf("client %s's limits on %s: %w", g.client, g.upstream, err)
		}
		if wait > 0 {
			g.heldBack(a)
			return dispatch.GateWait{For: wait, Limit: g.binding(a, now)}, nil
		}
	}
	if g.slots != nil && !g.slots.take() {
		if g.lim != nil {
			g.lim.Unreserve(a, now)
		}
		return dispatch.GateWait{Slot: true, Limit: g.name(fmt.Sprintf("max_concurrency (%d)", g.values.MaxConcurrency))}, nil
	}
	return dispatch.GateWait{}, nil
}

// binding names the rate that holds a back at now: the one whose bucket
// is the last to have room.
func (g *Gate) binding(a flow.Amount, now time.Time) string {
	var rpm, tpm time.Duration
	if g.values.RequestsPerMinute > 0 {
		rpm, _ = g.lim.TimeUntil(flow.Amount{flow.Requests: a[flow.Requests]}, now)
	}
	if g.values.TokensPerMinute > 0 {
		tpm, _ = g.lim.TimeUntil(flow.Amount{flow.Tokens: a[flow.Tokens]}, now)
	}
	if tpm > rpm {
		return g.name(fmt.Sprintf("tokens_per_minute (%g)", g.values.TokensPerMinute))
	}
	return g.name(fmt.Sprintf("requests_per_minute (%g)", g.values.RequestsPerMinute))
}

// Done implements dispatch.Gate.
func (g *Gate) Done(cost provider.Cost, end dispatch.GateEnd, now time.Time) {
	if g.lim != nil {
		a := amount(cost)
		switch {
		case !end.Sent:
			g.lim.Refund(a, now) // nothing reached the provider
		case end.Usage != nil:
			used := a
			used[flow.Tokens] = float64(end.Usage.InputTokens + end.Usage.OutputTokens)
			g.lim.Reconcile(a, used, now)
		}
	}
	if g.slots != nil {
		g.slots.release()
	}
}

// Predict implements dispatch.Gate.
func (g *Gate) Predict(requests, tokens float64, now time.Time) (time.Duration, string) {
	if g.lim == nil {
		return 0, ""
	}
	demand := flow.Amount{flow.Requests: requests, flow.Tokens: tokens}
	return g.lim.WaitFor(demand, now), g.binding(demand, now)
}

// heldBack adds a to the demand the gate held back.
func (g *Gate) heldBack(a flow.Amount) {
	g.mu.Lock()
	g.refused = g.refused.Add(a)
	g.mu.Unlock()
}

// turn returns when a job held back now (its room in wait) should come
// back: the next free turn at the client's rate, so the jobs a client has
// over its limit return one at a time rather than all at once.
func (g *Gate) turn(now time.Time, wait time.Duration, a flow.Amount) time.Time {
	step := time.Duration(0)
	if r := g.values.RequestsPerMinute; r > 0 {
		step = max(step, time.Duration(float64(time.Minute)/r))
	}
	if r := g.values.TokensPerMinute; r > 0 {
		step = max(step, time.Duration(a[flow.Tokens]/r*float64(time.Minute)))
	}
	if step == 0 { // concurrency alone: a completion frees a slot
		step = 100 * time.Millisecond
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	at := now.Add(max(wait, step))
	if g.nextTurn.After(at) {
		at = g.nextTurn
	}
	g.nextTurn = at.Add(step)
	return at
}

// slots are a client's concurrency slots on one upstream: at most cap
// requests in flight, cap being the client's max_concurrency or, on a
// cluster, this node's slots of it (share.go). Safe for concurrent use.
type slots struct {
	mu      sync.Mutex
	max     int // configured max_concurrency
	cap     int // applied: max, or the cluster's grant
	used    int
	refused int // takes refused since the last load
}

func newSlots(maxConcurrency int) *slots { return &slots{max: maxConcurrency, cap: maxConcurrency} }

func (s *slots) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used < s.cap {
		s.used++
		return true
	}
	s.refused++
	return false
}

func (s *slots) release() {
	s.mu.Lock()
	s.used--
	s.mu.Unlock()
}

// setCap applies the cluster's slots (< 0: the whole max_concurrency).
// Requests in flight above a lowered cap finish; no new one starts until
// they are below it.
func (s *slots) setCap(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 || n > s.max {
		n = s.max
	}
	s.cap = n
}

// inFlight counts the requests holding a slot (0 on nil).
func (s *slots) inFlight() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// load returns the slots held (the cap or those in use, the larger), the
// demand for slots (in use, and takes refused since the last load) and
// the configured max.
func (s *slots) load() (held int, demand float64, maxConcurrency int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	demand = float64(s.used + s.refused)
	s.refused = 0
	return max(s.cap, s.used), demand, s.max
}

type gateKey struct{ client, upstream string }

// gates holds the gates, made on first use. A reload that changes a
// pair's limits gives it a new gate; requests holding the old one finish
// with it.
type gates struct {
	clock clock.Clock
	// shares shares the limits with the cluster's other nodes (share.go);
	// nil when sharing is off.
	shares atomic.Pointer[clientShares]
	mu     sync.Mutex
	m      map[gateKey]*Gate
}

func newGates(c clock.Clock) *gates { return &gates{clock: c, m: map[gateKey]*Gate{}} }

// get returns the pair's gate for limits v, nil when v limits nothing.
func (gs *gates) get(client, upstream string, v LimitValues) (*Gate, error) {
	if v.None() {
		return nil, nil
	}
	k := gateKey{client, upstream}
	// On a cluster, the pair's share first: one store round trip the
	// first time (and after the pair left for being idle), so that a new
	// gate starts at its share; at once otherwise.
	var sh *clientShare
	if cs := gs.shares.Load(); cs != nil {
		sh = cs.join(client, upstream, v)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g, ok := gs.m[k]; ok && g.values == v {
		return g, nil
	}
	g := &Gate{client: client, upstream: upstream, values: v}
	if v.RequestsPerMinute > 0 || v.TokensPerMinute > 0 {
		var limits [flow.NumDims]float64
		limits[flow.Requests], limits[flow.Tokens] = v.RequestsPerMinute, v.TokensPerMinute
		lim, err := flow.NewLimiter(flow.LimiterConfig{Limits: limits, BurstSeconds: v.burstSeconds(), SafetyMargin: 1}, gs.clock.Now())
		if err != nil {
			return nil, fmt.Errorf("client %s limits on %s: %w", client, upstream, err)
		}
		g.lim = lim
	}
	if v.MaxConcurrency > 0 {
		g.slots = newSlots(v.MaxConcurrency)
	}
	if sh != nil {
		sh.attach(g, gs.clock.Now())
	}
	gs.m[k] = g
	return g, nil
}

// ClientLimitStatus is one client's limits and room on one upstream.
type ClientLimitStatus struct {
	Client   string      `json:"client"`
	Upstream string      `json:"upstream"`
	Limits   LimitValues `json:"limits"`
	// InFlight counts the client's requests holding a concurrency slot.
	InFlight int `json:"in_flight"`
	// Buckets are the client's own buckets, by dimension.
	Buckets map[string]BucketStatus `json:"buckets,omitempty"`
	// ClusterShare is, on a cluster, this node's share of the client's
	// limits there (share.go), and ClusterSlots its slots of its
	// max_concurrency (-1: no cap); omitted when sharing is off.
	ClusterShare *float64 `json:"cluster_share,omitempty"`
	ClusterSlots *int     `json:"cluster_slots,omitempty"`
}

// BucketStatus is one of a client's buckets, rounded: whole tokens,
// requests to a tenth.
type BucketStatus struct {
	LimitPerMinute float64 `json:"limit_per_minute"`
	Depth          float64 `json:"depth"`
	Level          float64 `json:"level"`
}

// status lists the gates in use, by client then upstream.
func (gs *gates) status(now time.Time) []ClientLimitStatus {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	out := make([]ClientLimitStatus, 0, len(gs.m))
	for k, g := range gs.m {
		st := ClientLimitStatus{Client: k.client, Upstream: k.upstream, Limits: g.values, InFlight: g.slots.inFlight()}
		if g.lim != nil {
			st.Buckets = map[string]BucketStatus{}
			for d, b := range g.lim.State(now) {
				if b.Capacity > 0 {
					st.Buckets[flow.Dim(d).String()] = BucketStatus{LimitPerMinute: round(flow.Dim(d), b.Capacity),
						Depth: round(flow.Dim(d), b.Depth), Level: round(flow.Dim(d), b.Level)}
				}
			}
		}
		if sh := gs.shares.Load(); sh != nil {
			share, n := sh.granted(k)
			st.ClusterShare, st.ClusterSlots = &share, &n
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ClientLimitStatus) int {
		return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Upstream, b.Upstream))
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// round rounds v in dimension d's unit: requests to a tenth, tokens
// whole.
func round(d flow.Dim, v float64) float64 {
	if d == flow.Requests {
		return float64(int64(v*10+0.5*sign(v))) / 10
	}
	return float64(int64(v + 0.5*sign(v)))
}

func sign(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}
