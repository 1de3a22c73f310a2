package jobs

import (
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/llm"
)

// route is where one admission was asked: the worker's own upstream
// (upstream == "") or a fallback's, with the target the admission layer
// chose (its model rewrite).
type route struct {
	upstream   string
	target     admit.Target
	dispatcher Dispatcher
}

// routeFor picks where class c's next admission is asked: the worker's
// upstream unless the admission layer sends the class to a fallback (its
// upstream unavailable, or too slow), by the same rule as a live
// request's. A job keeps its id, idempotency key and history whoever
// serves it; only the call goes elsewhere.
func (w *worker) routeFor(c llm.Priority) route {
	own := route{dispatcher: w.dispatcher}
	a := w.s.cfg.Admission
	if a == nil {
		return own
	}
	t, _, ok := a.Route(w.upstream, c, jobsClient, w.costs.estimate(c), time.Time{})
	if !ok {
		return own
	}
	own.target = t
	if t.Upstream == w.upstream {
		return own
	}
	d := w.s.cfg.Dispatchers[t.Upstream]
	if d == nil {
		return route{dispatcher: w.dispatcher}
	}
	return route{upstream: t.Upstream, target: t, dispatcher: d}
}

// servedByHeader, kept with every result, names the upstream that
// answered the job: its own, or the fallback that served it.
const servedByHeader = "X-Sluice-Upstream"

// CostHeader, kept with a result whose call was charged, is the call's
// cost in US dollars by the gateway's price table (docs/budgets.md).
const CostHeader = "X-Sluice-Cost-Usd"
