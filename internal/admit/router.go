package admit

import (
	"cmp"
	"context"
	"errors"
	"slices"
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
	// fallback is set on a fallback of the request's upstream: of names
	// that upstream, reason why the request was sent here instead.
	fallback bool
	of       string
	reason   string
	engine   Engine
}

// Engine returns t's engine.
func (t Target) Engine() Engine { return t.engine }

// Fallback reports whether t is a fallback of the request's upstream
// rather than the upstream itself.
func (t Target) Fallback() bool { return t.fallback }

// Reason is why the request goes to this fallback rather than its own
// upstream (FallbackUnavailable, FallbackDeadline; "" on its own).
func (t Target) Reason() string { return t.reason }

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
			t.fallback, t.of = true, name
			out = append(out, t)
		}
	}
	return out
}

// choose returns the index of the first candidate from cands[from] on
// that can take a request of class and cost now before deadline (zero:
// none): its engine available, its predicted wait ending before the
// deadline. reason says why the ones before it were passed over; ok is
// false when none can (the caller keeps the request where it is). It is
// the one rule both doors route by: a live request before its first
// attempt and after each failed one (Layer.Do), a job's class before its
// admission and a job's call after a failed attempt (Layer.RouteJobs,
// Layer.Reroute).
func (r *router) choose(cands []Target, from int, class llm.Priority, client string, cost provider.Cost, deadline time.Time) (i int, reason string, ok bool) {
	now := r.clock.Now()
	for i := from; i < len(cands); i++ {
		t := cands[i]
		if t.engine.Unavailable() {
			reason = cmp.Or(reason, FallbackUnavailable)
			continue
		}
		if !deadline.IsZero() {
			if wait, ok := r.predictWait(t, class, client, cost); ok && misses(now, wait, deadline) {
				reason = cmp.Or(reason, FallbackDeadline)
				continue
			}
		}
		return i, reason, true
	}
	return 0, "", false
}

// misses reports whether a request whose predicted wait from now is wait
// misses deadline: it would be sent at or after it.
func misses(now time.Time, wait time.Duration, deadline time.Time) bool {
	return !now.Add(wait).Before(deadline)
}

// predictWait is t's engine's predicted queue wait for a request of class
// and cost from client (ok false when the engine cannot predict).
func (r *router) predictWait(t Target, class llm.Priority, client string, cost provider.Cost) (time.Duration, bool) {
	p, ok := t.engine.(predictor)
	if !ok {
		return 0, false
	}
	wait, _ := p.PredictWait(cost, class, client)
	return wait, true
}

// at returns cands[i] as the target chosen for reason.
func at(cands []Target, i int, reason string) Target {
	t := cands[i]
	if t.fallback {
		t.reason = reason
	}
	return t
}

// JobRoute is where the job door sends a class's next admissions. The
// worker asks for its admission per class before it claims a job
// (Layer.RouteJobs), so the route names the deadline at or before which a
// job goes elsewhere rather than one job's target.
type JobRoute struct {
	// Target takes the class's jobs: their own upstream, or its first
	// fallback that can take them when it is unavailable (Target.Reason
	// says why).
	Target Target
	// Urgent, when UrgentBy is set, takes the jobs whose deadline is at
	// or before UrgentBy: Target's predicted wait ends at UrgentBy, so
	// such a job would miss its deadline there (FallbackDeadline). It is
	// the first fallback whose own predicted wait ends sooner.
	Urgent   Target
	UrgentBy time.Time
}

// For is where a job with deadline (zero: none) goes by r: where a live
// request with that deadline goes, except that a job neither upstream
// can make goes to the one whose predicted wait is shorter.
func (r JobRoute) For(deadline time.Time) Target {
	if !r.UrgentBy.IsZero() && !deadline.IsZero() && !deadline.After(r.UrgentBy) {
		return r.Urgent
	}
	return r.Target
}

// RouteJobs is where the jobs of class on upstreamName, waiting as client
// in the engines' queues with cost as their estimate, go now (JobRoute):
// the class's upstream unless it is unavailable, and for the jobs with a
// deadline its predicted wait would miss, a fallback that can take them
// sooner. ok is false when the upstream has no engine.
func (l *Layer) RouteJobs(upstreamName string, class llm.Priority, client string, cost provider.Cost) (JobRoute, bool) {
	r := l.router
	cands := r.candidates(upstreamName, class, false, nil)
	if len(cands) == 0 {
		return JobRoute{}, false
	}
	i, reason, ok := r.choose(cands, 0, class, client, cost, time.Time{})
	if !ok {
		return JobRoute{Target: cands[0]}, true // every one unavailable: the jobs wait on their own
	}
	out := JobRoute{Target: at(cands, i, reason)}
	wait, ok := r.predictWait(cands[i], class, client, cost)
	if !ok || wait <= 0 || i+1 >= len(cands) {
		return out, true
	}
	by := r.clock.Now().Add(wait)
	if j, _, ok := r.choose(cands, i+1, class, client, cost, by); ok {
		out.Urgent, out.UrgentBy = at(cands, j, FallbackDeadline), by
	}
	return out, true
}

// Reroute is where a job's call of class, costing cost, with deadline
// (zero: none), goes after its attempt on from failed with err: the next
// fallback of its upstream that can take it now, when err is a failure a
// fallback helps with (an outage: the first failure of a new one sends
// the call there at once, as it sends a live request). ok is false when
// the call stays where it failed (it retries there after its backoff).
func (l *Layer) Reroute(from Target, class llm.Priority, client string, cost provider.Cost, deadline time.Time, err error) (Target, bool) {
	reason := fallbackReason(err, from)
	if reason == "" {
		return Target{}, false
	}
	r := l.router
	cands := r.candidates(cmp.Or(from.of, from.Upstream), class, false, nil)
	pos := slices.IndexFunc(cands, func(t Target) bool { return t.Upstream == from.Upstream })
	if pos < 0 {
		return Target{}, false
	}
	i, _, ok := r.choose(cands, pos+1, class, client, cost, deadline)
	if !ok {
		return Target{}, false
	}
	return at(cands, i, reason), true
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
	i, reason, ok := r.choose(cands, 0, req.Priority, req.Client, req.Cost, req.Deadline)
	if !ok {
		i, reason = 0, "" // none can take it: it waits on its own upstream
	}
	var firstErr error
	tried := 0 // attempts on the upstreams tried before
	for {
		t := at(cands, i, reason)
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
		if i, _, ok = r.choose(cands, i+1, req.Priority, req.Client, req.Cost, req.Deadline); !ok || ctx.Err() != nil {
			break
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
	case errors.Is(de, dispatch.ErrCallFailed) && de.Outage():
		// A job's one attempt (a ticket's call) failed as the FailFast
		// attempt of a live request that falls back does.
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
