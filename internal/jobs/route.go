package jobs

import (
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// route is where one admission was asked: the worker's own upstream
// (upstream == "") or a fallback's, with the target the admission layer
// chose (its model rewrite).
type route struct {
	upstream   string
	target     admit.Target
	dispatcher Dispatcher
	// by, when set, is an urgent route's: its admission is for the jobs
	// whose deadline is at or before by, which the worker's own upstream
	// would make miss it (admit.JobRoute.Urgent).
	by time.Time
}

// routeFor picks where class c's next admission is asked: the worker's
// upstream unless the admission layer sends the class to a fallback (its
// upstream unavailable), by the same rule as a live request's. A job keeps
// its id, idempotency key and history whoever serves it; only the call
// goes elsewhere.
func (w *worker) routeFor(c llm.Priority) route {
	r, ok := w.jobRoute(c)
	if !ok {
		return route{dispatcher: w.dispatcher}
	}
	return w.routeTo(r.Target)
}

// urgentFor is the route of class c's jobs whose deadline the worker's
// upstream's predicted wait would miss, when the admission layer names a
// fallback that can take them sooner.
func (w *worker) urgentFor(c llm.Priority) (route, bool) {
	r, ok := w.jobRoute(c)
	if !ok || r.UrgentBy.IsZero() {
		return route{}, false
	}
	u := w.routeTo(r.Urgent)
	if u.upstream == "" {
		return route{}, false
	}
	u.by = r.UrgentBy
	return u, true
}

// routeForJob is where a job already in hand goes (a handed-off one): by
// its deadline, the same rule as the class's routes.
func (w *worker) routeForJob(c llm.Priority, deadline time.Time) route {
	r, ok := w.jobRoute(c)
	if !ok {
		return route{dispatcher: w.dispatcher}
	}
	return w.routeTo(r.For(deadline))
}

// jobRoute asks the admission layer where class c's jobs go.
func (w *worker) jobRoute(c llm.Priority) (admit.JobRoute, bool) {
	a := w.s.cfg.Admission
	if a == nil {
		return admit.JobRoute{}, false
	}
	return a.RouteJobs(w.upstream, c, jobsClient, w.costs.estimate(c))
}

// routeTo is the route to target t: the worker's own dispatcher when t is
// its upstream (or has no dispatcher here), the fallback's otherwise.
func (w *worker) routeTo(t admit.Target) route {
	if t.Upstream == w.upstream {
		return route{target: t, dispatcher: w.dispatcher}
	}
	d := w.s.cfg.Dispatchers[t.Upstream]
	if d == nil {
		return route{dispatcher: w.dispatcher}
	}
	return route{upstream: t.Upstream, target: t, dispatcher: d}
}

// servedBy names the upstream the route's calls go to.
func (w *worker) servedBy(r route) string {
	if r.upstream != "" {
		return r.upstream
	}
	return w.upstream
}

// servedByHeader, kept with every result, names the upstream that
// answered the job: its own, or the fallback that served it (the jobs
// API's served_by).
const servedByHeader = frontdoor.HeaderUpstream

// CostHeader, kept with a result whose call was charged, is the call's
// cost in US dollars by the gateway's price table (docs/budgets.md).
const CostHeader = "X-Sluice-Cost-Usd"
