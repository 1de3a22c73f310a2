package jobs

import "github.com/sluicehq/sluice/internal/llm"

// Fallbacks are where an upstream's jobs go while it is unavailable.
type Fallbacks struct {
	// To are the fallback upstreams, tried in order.
	To []FallbackTarget
	// Classes are the priority classes that may fall back. Defaults to
	// every class (all false means all).
	Classes [llm.NumPriorities]bool
}

// FallbackTarget is one fallback upstream.
type FallbackTarget struct {
	// Upstream names the fallback's dispatcher. Required.
	Upstream string
	// Models rewrites the job's model for this fallback ({from: to}); a
	// model not listed is sent as it is.
	Models map[string]string
}

// allows reports whether jobs of class c may fall back.
func (f Fallbacks) allows(c llm.Priority) bool {
	return f.Classes == [llm.NumPriorities]bool{} || f.Classes[c]
}

// availability is what a dispatcher says of an outage; *dispatch.Dispatcher
// implements it. A dispatcher that does not is always available.
type availability interface{ Unavailable() bool }

func unavailable(d Dispatcher) bool {
	a, ok := d.(availability)
	return ok && a.Unavailable()
}

// route is where one admission was asked: the worker's own upstream
// (upstream == "") or a fallback's.
type route struct {
	upstream   string
	dispatcher Dispatcher
	models     map[string]string
}

// routeFor picks where class c's next admission is asked: the worker's
// upstream unless it is unavailable and a fallback of the class is not. A
// job keeps its id, idempotency key and history whoever serves it; only
// the call goes elsewhere.
func (w *worker) routeFor(c llm.Priority) route {
	own := route{dispatcher: w.dispatcher}
	fb, ok := w.s.cfg.Fallbacks[w.upstream]
	if !ok || len(fb.To) == 0 || !fb.allows(c) || !unavailable(w.dispatcher) {
		return own
	}
	for _, to := range fb.To {
		d := w.s.cfg.Dispatchers[to.Upstream]
		if !unavailable(d) {
			return route{upstream: to.Upstream, dispatcher: d, models: to.Models}
		}
	}
	return own
}

// servedByHeader, kept with every result, names the upstream that
// answered the job: its own, or the fallback that served it.
const servedByHeader = "X-Sluice-Upstream"

// CostHeader, kept with a result whose call was charged, is the call's
// cost in US dollars by the gateway's price table (docs/budgets.md).
const CostHeader = "X-Sluice-Cost-Usd"
