package server

import (
	"cmp"
	"context"
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
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobs"
)

// Per-client limits: a client's share of an upstream, enforced before its
// request reaches the upstream's engine, so one team cannot take the whole
// quota even at the same priority. Each (client, upstream) pair has its own
// token buckets (a flow.Limiter, the same engine that mirrors the
// provider's quota) and its own concurrency slots. A request over its
// client's limit waits for its own client's room; when that room comes
// after the request's deadline it is answered 429 at once, with
// retry-after from the client's own bucket. Other clients never wait for
// it: their buckets and slots are their own.

// ClientBurstSecondsDefault is how many seconds of a client's rate its
// buckets hold when full: the burst a client that was quiet may send at
// once. Short, so that a client's burst cannot fill the upstream's queue
// ahead of the others.
const ClientBurstSecondsDefault = 1

// LimitValues are one set of per-minute limits and a concurrency cap; zero
// means no limit in that dimension.
type LimitValues struct {
	// RequestsPerMinute caps requests sent per minute. Defaults to no
	// limit.
	RequestsPerMinute float64 `yaml:"requests_per_minute"`
	// TokensPerMinute caps input+output tokens per minute, charged at the
	// request's estimate (input estimate + max_tokens) before sending and
	// corrected to the usage the answer reports. Defaults to no limit.
	TokensPerMinute float64 `yaml:"tokens_per_minute"`
	// MaxConcurrency caps the client's requests in flight at once.
	// Defaults to no limit.
	MaxConcurrency int `yaml:"max_concurrency"`
	// BurstSeconds is how many seconds of the rates the client's buckets
	// hold when full, in (0, 60]. Defaults to ClientBurstSecondsDefault
	// (1).
	BurstSeconds float64 `yaml:"burst_seconds"`
}

// ClientLimits are a client's limits on each upstream: LimitValues apply
// to every upstream (each with its own buckets), and Upstreams overrides
// them field by field for the upstreams it names.
type ClientLimits struct {
	LimitValues `yaml:",inline"`
	// Upstreams overrides the limits for one upstream, by upstream name;
	// a zero field keeps the client-wide value. Defaults to none.
	Upstreams map[string]LimitValues `yaml:"upstreams"`
}

// For returns the limits that apply on upstream.
func (l ClientLimits) For(upstream string) LimitValues {
	v := l.LimitValues
	if o, ok := l.Upstreams[upstream]; ok {
		if o.RequestsPerMinute != 0 {
			v.RequestsPerMinute = o.RequestsPerMinute
		}
		if o.TokensPerMinute != 0 {
			v.TokensPerMinute = o.TokensPerMinute
		}
		if o.MaxConcurrency != 0 {
			v.MaxConcurrency = o.MaxConcurrency
		}
		if o.BurstSeconds != 0 {
			v.BurstSeconds = o.BurstSeconds
		}
	}
	return v
}

func (v LimitValues) none() bool {
	return v.RequestsPerMinute == 0 && v.TokensPerMinute == 0 && v.MaxConcurrency == 0
}

func (v LimitValues) validate() error {
	switch {
	case v.RequestsPerMinute < 0:
		return errors.New("requests_per_minute: must be >= 0")
	case v.TokensPerMinute < 0:
		return errors.New("tokens_per_minute: must be >= 0")
	case v.MaxConcurrency < 0:
		return errors.New("max_concurrency: must be >= 0")
	case v.BurstSeconds < 0 || v.BurstSeconds > 60:
		return errors.New("burst_seconds: must be in (0, 60]")
	}
	return nil
}

// validate checks the values and that every override names an upstream.
func (l ClientLimits) validate(upstreams map[string]bool) error {
	if err := l.LimitValues.validate(); err != nil {
		return err
	}
	for name, v := range l.Upstreams {
		if !upstreams[name] {
			return fmt.Errorf("upstreams.%s: no upstream is named %q", name, name)
		}
		if err := v.validate(); err != nil {
			return fmt.Errorf("upstreams.%s.%w", name, err)
		}
	}
	return nil
}

// clientGate is one (client, upstream) pair's buckets and slots.
type clientGate struct {
	values LimitValues
	lim    *flow.Limiter // nil without a rate limit
	slots  *slotGate     // nil without a concurrency limit

	mu       sync.Mutex
	nextTurn time.Time   // the next free turn of a job refused by the gate
	refused  flow.Amount // running sum of the costs refused or made to wait (demand, client_share.go)
}

// refusedCost adds cost to the demand the gate turned away or held back.
func (g *clientGate) refusedCost(cost flow.Amount) {
	g.mu.Lock()
	g.refused = g.refused.Add(cost)
	g.mu.Unlock()
}

// turn returns when a job refused now (its room in wait) should come
// back: the next free turn at the client's rate, so the jobs a client has
// over its limit return one at a time rather than all at once.
func (g *clientGate) turn(now time.Time, wait time.Duration, cost flow.Amount) time.Time {
	step := time.Duration(0)
	if r := g.values.RequestsPerMinute; r > 0 {
		step = max(step, time.Duration(float64(time.Minute)/r))
	}
	if r := g.values.TokensPerMinute; r > 0 {
		step = max(step, time.Duration(cost[flow.Tokens]/r*float64(time.Minute)))
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

type gateKey struct{ client, upstream string }

// clientGates holds the gates, made on first use. A reload that changes a
// pair's limits gives it a new gate; requests holding the old one finish
// with it.
type clientGates struct {
	clock clock.Clock
	// shares shares the limits with the cluster's other nodes
	// (client_share.go); nil when sharing is off.
	shares atomic.Pointer[clientShares]
	mu     sync.Mutex
	m      map[gateKey]*clientGate
}

func newClientGates(c clock.Clock) *clientGates {
	return &clientGates{clock: c, m: map[gateKey]*clientGate{}}
}

func (g *clientGates) get(client, upstream string, v LimitValues) (*clientGate, error) {
	k := gateKey{client, upstream}
	// On a cluster, the pair's share first: one store round trip the
	// first time (and after the pair left for being idle), so that a new
	// gate starts at its share; at once otherwise.
	var sh *clientShare
	if cs := g.shares.Load(); cs != nil {
		sh = cs.join(client, upstream, v)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt, ok := g.m[k]; ok && gt.values == v {
		return gt, nil
	}
	gt := &clientGate{values: v}
	if v.RequestsPerMinute > 0 || v.TokensPerMinute > 0 {
		var limits [flow.NumDims]float64
		limits[flow.Requests], limits[flow.Tokens] = v.RequestsPerMinute, v.TokensPerMinute
		lim, err := flow.NewLimiter(flow.LimiterConfig{Limits: limits, BurstSeconds: cmp.Or(v.BurstSeconds, ClientBurstSecondsDefault), SafetyMargin: 1}, g.clock.Now())
		if err != nil {
			return nil, fmt.Errorf("client %s limits on %s: %w", client, upstream, err)
		}
		gt.lim = lim
	}
	if v.MaxConcurrency > 0 {
		gt.slots = newSlotGate(v.MaxConcurrency)
	}
	if sh != nil {
		sh.attach(gt, g.clock.Now())
	}
	g.m[k] = gt
	return gt, nil
}

// clientAdmission is a request admitted under its client's limits; done
// gives back its slot and corrects its token charge.
type clientAdmission struct {
	gate *clientGate
	cost flow.Amount
	c    clock.Clock
}

// done frees the slot; with the usage known (in, out > 0) the token charge
// is corrected to it.
func (a *clientAdmission) done(in, out int64) {
	if a == nil {
		return
	}
	if a.gate.lim != nil && (in > 0 || out > 0) {
		a.gate.lim.Reconcile(a.cost, flow.NewAmount(in, out), a.c.Now())
	}
	if a.gate.slots != nil {
		a.gate.slots.release()
	}
}

// errClientLimit is a request refused because its client's own limit
// would keep it past its deadline.
var errClientLimit = errors.New("client limit")

// admitClient waits until req fits its client's limits on u, or refuses
// it (a *frontdoor.Problem wrapped in the error: 429 with retry-after)
// when that would be after its deadline. It returns nil, nil when the
// client has no limits there.
func (s *Server) admitClient(ctx context.Context, cl client, u *upstream, req *dispatch.Request) (*clientAdmission, error) {
	v := cl.limits.For(u.cfg.Name)
	if v.none() {
		return nil, nil
	}
	g, err := s.gates.get(cl.name, u.cfg.Name, v)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	deadline := req.Deadline
	if deadline.IsZero() {
		deadline = now.Add(u.cfg.Classes.Get(req.Priority).MaxWait)
	}
	cost := flow.Amount{}
	cost[flow.Requests], cost[flow.Tokens] = 1, float64(req.Cost.InputTokens+req.Cost.OutputTokens)
	if g.lim != nil {
		for waited := false; ; waited = true {
			wait, err := g.lim.Reserve(cost, now)
			if errors.Is(err, flow.ErrTooLarge) {
				return nil, limitRefusal(fmt.Sprintf("the request's %.0f tokens exceed client %s's tokens_per_minute on %s", cost[flow.Tokens], cl.name, u.cfg.Name), 0)
			}
			if err != nil {
				return nil, err
			}
			if wait == 0 {
				break
			}
			if !waited {
				g.refusedCost(cost)
			}
			if now.Add(wait).After(deadline) {
				return nil, limitRefusal(fmt.Sprintf("client %s is over its own rate limit on %s (requests_per_minute/tokens_per_minute) and its room comes after the request's deadline", cl.name, u.cfg.Name), wait)
			}
			if err := clock.Sleep(ctx, s.clock, wait); err != nil {
				return nil, err
			}
			now = s.clock.Now()
		}
	}
	a := &clientAdmission{gate: g, cost: cost, c: s.clock}
	if g.slots == nil {
		return a, nil
	}
	changed, ok := g.slots.tryAcquire()
	if ok {
		return a, nil
	}
	g.slots.waiting(1)
	defer g.slots.waiting(-1)
	t := s.clock.NewTimer(deadline.Sub(now))
	defer t.Stop()
	for {
		select {
		case <-changed:
			if changed, ok = g.slots.tryAcquire(); ok {
				return a, nil
			}
		case <-ctx.Done():
			a.refund()
			return nil, context.Cause(ctx)
		case <-t.C():
			a.refund()
			return nil, limitRefusal(fmt.Sprintf("client %s has max_concurrency %d requests in flight on %s until past the request's deadline", cl.name, v.MaxConcurrency, u.cfg.Name), time.Second)
		}
	}
}

// admitClientJob admits a job's call under its client's limits on u
// without waiting: nil, nil when the client has none there. A job over
// them gets a *jobs.BudgetError whose RetryAt is its client's next free
// turn (it waits in the store without burning an attempt, and the worker
// goes on with other clients' jobs); one that can never fit dies.
func (s *Server) admitClientJob(cl client, u *upstream, req *dispatch.Request) (*clientAdmission, error) {
	v := cl.limits.For(u.cfg.Name)
	if v.none() {
		return nil, nil
	}
	g, err := s.gates.get(cl.name, u.cfg.Name, v)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	cost := flow.Amount{}
	cost[flow.Requests], cost[flow.Tokens] = 1, float64(req.Cost.InputTokens+req.Cost.OutputTokens)
	refuse := func(msg string, wait time.Duration) error {
		return &jobs.BudgetError{Status: http.StatusTooManyRequests, Message: msg, RetryAt: g.turn(now, wait, cost)}
	}
	if g.lim != nil {
		wait, err := g.lim.Reserve(cost, now)
		if errors.Is(err, flow.ErrTooLarge) {
			return nil, &jobs.BudgetError{Status: http.StatusBadRequest,
				Message: fmt.Sprintf("the request's %.0f tokens exceed client %s's tokens_per_minute on %s", cost[flow.Tokens], cl.name, u.cfg.Name)}
		}
		if err != nil {
			return nil, err
		}
		if wait > 0 {
			g.refusedCost(cost)
			return nil, refuse(fmt.Sprintf("client %s is over its own rate limit on %s (requests_per_minute/tokens_per_minute)", cl.name, u.cfg.Name), wait)
		}
	}
	a := &clientAdmission{gate: g, cost: cost, c: s.clock}
	if g.slots != nil {
		if _, ok := g.slots.tryAcquire(); !ok {
			g.slots.refusedOne()
			a.refund()
			return nil, refuse(fmt.Sprintf("client %s has max_concurrency %d requests in flight on %s", cl.name, v.MaxConcurrency, u.cfg.Name), 0)
		}
	}
	return a, nil
}

// refund gives back the rate charge of a request that never went out.
func (a *clientAdmission) refund() {
	if a == nil {
		return
	}
	if a.gate.lim != nil {
		a.gate.lim.Refund(a.cost, a.c.Now())
	}
}

// limitError is a request refused by its client's own limit.
type limitError struct{ pr frontdoor.Problem }

func (e *limitError) Error() string { return e.pr.Message }
func (e *limitError) Unwrap() error { return errClientLimit }

func limitRefusal(msg string, retryAfter time.Duration) error {
	return &limitError{pr: frontdoor.Problem{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
		Message: msg, RetryAfter: retryAfter}}
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
	// limits there (client_share.go), and ClusterSlots its slots of its
	// max_concurrency (-1: no cap); omitted when sharing is off.
	ClusterShare *float64 `json:"cluster_share,omitempty"`
	ClusterSlots *int     `json:"cluster_slots,omitempty"`
}

// status lists the gates in use, by client then upstream.
func (g *clientGates) status(now time.Time) []ClientLimitStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]ClientLimitStatus, 0, len(g.m))
	for k, gt := range g.m {
		st := ClientLimitStatus{Client: k.client, Upstream: k.upstream, Limits: gt.values, InFlight: gt.slots.inFlight()}
		if gt.lim != nil {
			st.Buckets = map[string]BucketStatus{}
			for d, b := range gt.lim.State(now) {
				if b.Capacity > 0 {
					st.Buckets[flow.Dim(d).String()] = BucketStatus{LimitPerMinute: b.Capacity, Depth: b.Depth, Level: b.Level}
				}
			}
		}
		if sh := g.shares.Load(); sh != nil {
			share, slots := sh.granted(k)
			st.ClusterShare, st.ClusterSlots = &share, &slots
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
