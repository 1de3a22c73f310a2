package admit

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// Fallback reasons (Observer.FallbackTaken, the request log, a job's
// record).
const (
	// FallbackUnavailable: the upstream is in an outage (its breaker
	// open, or its call failed with an overload, a server error or a
	// timeout).
	FallbackUnavailable = "unavailable"
	// FallbackDeadline: the upstream's predicted queue wait exceeds the
	// request's deadline.
	FallbackDeadline = "deadline"
)

// Target is an upstream a request may be sent to: its own, or one of its
// fallbacks, with the model rewrite that fallback asks for.
type Target struct {
	Upstream string
	Protocol llm.Protocol
	// Models rewrites the request's model ({from: to}) on a fallback;
	// empty for the request's own upstream.
	Models map[string]string
	// fallback is set on a fallback of the request's upstream.
	fallback bool
	engine   Engine
}

// Engine returns t's engine.
func (t Target) Engine() Engine { return t.engine }

// Fallback reports whether t is a fallback of the request's upstream
// rather than the upstream itself.
func (t Target) Fallback() bool { return t.fallback }

// model is the model a request for model is sent to t as.
func (t Target) model(model string) string {
	if to, ok := t.Models[model]; ok {
		return to
	}
	return model
}

// Rewrite returns req as t takes it: the model rewritten by t's models
// map, and priced as the model it is sent as.
func (t Target) Rewrite(req dispatch.Request) dispatch.Request {
	if len(t.Models) == 0 {
		return req
	}
	req.Body = frontdoor.RewriteModel(req.Body, t.Models)
	if to, ok := t.Models[req.Cost.Model]; ok {
		req.Cost.Model = to
	}
	return req
}

// predictor is what an engine that can predict its queue wait offers;
// *dispatch.Dispatcher does.
type predictor interface {
	PredictWait(cost provider.Cost, class llm.Priority, client string) (time.Duration, bool)
}

// router decides where a request goes: its upstream unless that is known
// to be unavailable or predicted to miss the deadline, and a fallback of
// the class is not. One rule for live requests (Layer.Do) and jobs
// (Layer.Route).
type router struct {
	clock   clock.Clock
	obs     Observer
	ups     map[string]upstream.Config
	engines atomic.Pointer[map[string]Engine]
}

func newRouter(ups []upstream.Config, clk clock.Clock, obs Observer) *router {
	r := &router{clock: clk, obs: obs, ups: map[string]upstream.Config{}}
	for _, u := range ups {
		r.ups[u.Name] = u.WithDefaults()
	}
	empty := map[string]Engine{}
	r.engines.Store(&empty)
	return r
}

func (r *router) bind(engines map[string]Engine) { r.engines.Store(&engines) }

// target is the upstream named as a target (ok false when it has no
// engine).
func (r *router) target(name string, models map[string]string) (Target, bool) {
	e, ok := (*r.engines.Load())[name]
	if !ok {
		return Target{}, false
	}
	return Target{Upstream: name, Protocol: r.ups[name].Protocol, Models: models, engine: e}, true
}

// candidates are where a request of class on name may go, in order: name
// itself, then its fallbacks when the class may fall back and the caller
// did not opt out, each one that allowed (nil: any) lets the request use
// (its upstream, and its model as that fallback rewrites it).
func (r *router) candidates(name string, class llm.Priority, noFallback bool, allowed func(Target) bool) []Target {
	own, ok := r.target(name, nil)
	if !ok {
		return nil
	}
	out := []Target{own}
	u := r.ups[name]
	if noFallback || !u.FallbackClass(class) {
		return out
	}
	for _, f := range u.Fallbacks {
		if t, ok := r.target(f.Upstream, f.Models); ok && (allowed == nil || allowed(t)) {
			t.fallback = true
			out = append(out, t)
		}
	}
	return out
}

// choose returns the index of the first candidate that can take a request
// of class and cost now before deadline (its engine available, its
// predicted wait within the deadline), and why the ones before it were
// passed over; 0 and "" when none can (the request waits on its own).
func (r *router) choose(cands []Target, class llm.Priority, client string, cost provider.Cost, deadline time.Time) (int, string) {
	now := r.clock.Now()
	reason := ""
	for i, t := range cands {
		if t.engine.Unavailable() {
			reason = cmp.Or(reason, FallbackUnavailable)
			continue
		}
		if p, ok := t.engine.(predictor); ok && !deadline.IsZero() {
			if wait, _ := p.PredictWait(cost, class, client); now.Add(wait).After(deadline) {
				reason = cmp.Or(reason, FallbackDeadline)
				continue
			}
		}
		return i, reason
	}
	return 0, ""
}

// Route is where a call of class from client (the name it waits as in
// the engine's queue), costing cost, with deadline (zero: none) goes now: its upstream, or the first fallback that can take it
// when its upstream cannot (the same rule as a live request's), with the
// reason ("" when it stays on its own upstream). ok is false when the
// upstream has no engine.
func (l *Layer) Route(upstreamName string, class llm.Priority, client string, cost provider.Cost, deadline time.Time) (t Target, reason string, ok bool) {
	cands := l.router.candidates(upstreamName, class, false, nil)
	if len(cands) == 0 {
		return Target{}, "", false
	}
	i, reason := l.router.choose(cands, class, client, cost, deadline)
	if i > 0 {
		l.obs.FallbackTaken(upstreamName, cands[i].Upstream, reason)
	}
	return cands[i], reason, true
}

// do is Layer.Do: the candidates in order from the first that can take
// the request, each attempt shortened (FailFast) while another candidate
// follows, until one answers or fails for a reason no fallback helps
// with. Every attempt shares the request's one deadline. A response is
// only ever taken from one upstream: Do returns before any byte reaches
// the client, so a stream never switches once it has started.
func (r *router) do(ctx context.Context, name string, req *dispatch.Request, noFallback bool, trail *Trail,
	allowed func(Target) bool, send func(context.Context, Target, *dispatch.Request) (*dispatch.Response, error)) (*dispatch.Response, error) {
	cands := r.candidates(name, req.Priority, noFallback, allowed)
	if len(cands) == 0 {
		return nil, &dispatch.Error{Reason: dispatch.ErrStopped, Message: "no engine for upstream " + strconv.Quote(name)}
	}
	if len(cands) == 1 {
		resp, err := send(ctx, cands[0], req)
		trail.add(cands[0].Upstream, resp, err, "")
		return resp, err
	}
	if req.Deadline.IsZero() {
		// One end-to-end deadline: the upstream's class default, fixed now.
		req.Deadline = r.clock.Now().Add(r.ups[name].Classes.Get(req.Priority).MaxWait)
	}
	first, reason := r.choose(cands, req.Priority, req.Client, req.Cost, req.Deadline)
	var firstErr error
	tried := 0 // attempts on the upstreams tried before
	for i := first; i < len(cands); i++ {
		if i > 0 && ctx.Err() != nil {
			break
		}
		t := cands[i]
		if i > 0 {
			r.obs.FallbackTaken(name, t.Upstream, reason)
		}
		next := t.Rewrite(*req)
		next.FailFast = i < len(cands)-1
		resp, err := send(ctx, t, &next)
		if err == nil {
			trail.add(t.Upstream, resp, nil, "")
			resp.Attempts += tried // every attempt, on every upstream tried
			return resp, nil
		}
		if de, ok := errors.AsType[*dispatch.Error](err); ok {
			tried += de.Attempts
		}
		reason = fallbackReason(err, t)
		trail.add(t.Upstream, nil, err, reason)
		if firstErr == nil {
			firstErr = err
		}
		if reason == "" {
			return nil, err // an answer no fallback changes (the client's own error, a budget)
		}
	}
	if firstErr == nil {
		firstErr = context.Cause(ctx)
	}
	return nil, firstErr // the first upstream's
}

// fallbackReason says why err lets a request fall back ("" when it does
// not): nothing reached the client and the upstream is unavailable or
// cannot make the deadline.
func fallbackReason(err error, t Target) string {
	var de *dispatch.Error
	if !errors.As(err, &de) {
		return ""
	}
	switch {
	case errors.Is(de, dispatch.ErrUnavailable):
		return FallbackUnavailable
	case errors.Is(de, dispatch.ErrShed):
		return FallbackDeadline
	case (errors.Is(de, dispatch.ErrRetriesExhausted) || errors.Is(de, dispatch.ErrRetryBudget)) &&
		de.Status == dispatch.OutageStatus(t.Protocol):
		return FallbackUnavailable
	}
	return ""
}

// Trail is the upstreams a request was sent to, in order, with the
// attempts made on each: the last one served it (or failed it). The
// request log prints it.
type Trail struct {
	Legs []Leg
}

// Leg is one upstream a request was sent to.
type Leg struct {
	Upstream string
	Attempts int
	// FellBack says why the next upstream was tried ("" for the last).
	FellBack string
}

func (t *Trail) add(name string, resp *dispatch.Response, err error, fellBack string) {
	if t == nil {
		return
	}
	n := 0
	var de *dispatch.Error
	switch {
	case resp != nil:
		n = resp.Attempts
	case errors.As(err, &de):
		n = de.Attempts
	}
	t.Legs = append(t.Legs, Leg{Upstream: name, Attempts: n, FellBack: fellBack})
}

// Attempts is every attempt on every upstream tried, given last, the
// attempts of the last leg's error (a response that served already
// counts every upstream's).
func (t *Trail) Attempts(last int) int {
	if t == nil || len(t.Legs) == 0 {
		return last
	}
	n := last
	for _, l := range t.Legs[:len(t.Legs)-1] {
		n += l.Attempts
	}
	return n
}

// ServedBy is the upstream of the last leg ("" when none).
func (t *Trail) ServedBy() string {
	if t == nil || len(t.Legs) == 0 {
		return ""
	}
	return t.Legs[len(t.Legs)-1].Upstream
}

// String is "claude:1,backup:1": every upstream tried with its attempts.
func (t *Trail) String() string {
	if t == nil {
		return ""
	}
	parts := make([]string, len(t.Legs))
	for i, l := range t.Legs {
		parts[i] = l.Upstream + ":" + strconv.Itoa(l.Attempts)
	}
	return strings.Join(parts, ",")
}
