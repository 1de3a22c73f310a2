package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/frontdoor"
)

// snapshotter is implemented by engines that can report their state (the
// real dispatcher does).
type snapshotter interface {
	Snapshot() dispatch.Snapshot
}

// ReadyCheckTimeoutDefault bounds each check of GET /readyz.
const ReadyCheckTimeoutDefault = 2 * time.Second

// ReadyCheck is one check of GET /readyz.
type ReadyCheck struct {
	// Name names what was checked: "store", or "upstream NAME".
	Name string `json:"name"`
	// OK reports whether the check passed.
	OK bool `json:"ok"`
	// Detail says what was found, e.g. "breaker open" or the store's error.
	Detail string `json:"detail,omitempty"`
}

// ReadyResponse is GET /readyz's body.
type ReadyResponse struct {
	// Ready is true when the store (if any) answers and at least one
	// upstream's breaker is not open; the status is then 200, else 503.
	Ready  bool         `json:"ready"`
	Checks []ReadyCheck `json:"checks"`
}

// serveLivez answers 200 while the process serves HTTP at all.
func (s *Server) serveLivez(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"live":true}` + "\n"))
}

// serveReadyz checks the job store (reachable: a bounded read) and every
// upstream's circuit breaker, names each check, and answers 503 when the
// gateway should not get traffic: the store does not answer, or every
// upstream's breaker is open. An open breaker on one upstream of several
// is reported but leaves the gateway ready: its other upstreams serve.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	resp := ReadyResponse{Ready: true, Checks: []ReadyCheck{s.storeCheck(r.Context())}}
	if !resp.Checks[0].OK {
		resp.Ready = false
	}
	anyUp := len(s.order) == 0
	for _, name := range s.order {
		c := ReadyCheck{Name: "upstream " + name, OK: true, Detail: "breaker closed"}
		if sn, ok := s.upstreams[name].engine.(snapshotter); ok {
			snap := sn.Snapshot()
			c.Detail = "breaker " + snap.Breaker.String()
			if snap.Breaker == flow.Open {
				c.OK = false
				c.Detail += ", next probe at " + snap.BreakerReadyAt.UTC().Format(time.RFC3339)
			}
		}
		anyUp = anyUp || c.OK
		resp.Checks = append(resp.Checks, c)
	}
	resp.Ready = resp.Ready && anyUp
	if c, ok := s.clusterCheck(); ok {
		resp.Checks = append(resp.Checks, c)
	}
	status := http.StatusOK
	if !resp.Ready {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

// clusterCheck is /readyz's cluster check: a node on its fallback share
// still serves (within its conservative share), so it stays ready, and
// says so.
func (s *Server) clusterCheck() (ReadyCheck, bool) {
	cs := s.view.ClusterStatus()
	if cs == nil {
		return ReadyCheck{}, false
	}
	c := ReadyCheck{Name: "cluster", OK: true, Detail: "sharing quotas as node " + cs.Node}
	if cs.Node != cs.ConfiguredNode && cs.ConfiguredNode != "" {
		c.Detail += " (node_id " + cs.ConfiguredNode + " is in use by another process)"
	}
	if cs.Degraded {
		c.Detail = "shared store unreachable: running on a conservative local share (1/N of each quota)"
	}
	return c, true
}

// storeCheck reads the job store once, bounded by ReadyCheckTimeoutDefault.
// The driver's error goes to the log, not to the (unauthenticated) caller.
func (s *Server) storeCheck(ctx context.Context) ReadyCheck {
	c := ReadyCheck{Name: "store", OK: true}
	svc := s.jobs.Load()
	switch {
	case s.cfg.Store == StoreNone && s.store == nil:
		c.Detail = "disabled (store: none)"
		return c
	case svc == nil:
		c.OK, c.Detail = false, "the job queue is not running"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyCheckTimeoutDefault)
	defer cancel()
	if _, err := svc.Store().PausedUpstreams(ctx); err != nil {
		s.log.Warn("readiness: the job store did not answer", "err", err)
		c.OK, c.Detail = false, "the job store did not answer"
		return c
	}
	c.Detail = "reachable"
	return c
}

// fixedRoutes are the gateway's own GET routes, for 405 answers.
var fixedRoutes = []string{"/healthz", "/livez", "/readyz", "/metrics", "/v1/status", "/v1/status/history", "/ui"}

// serveNotFound answers a path no route serves: 405 (with Allow) for a
// wrong method on one of the gateway's own GET routes, else 404. Both in a
// JSON error shape both SDK families read (Anthropic's envelope plus
// OpenAI's param and code).
func (s *Server) serveNotFound(w http.ResponseWriter, r *http.Request) {
	status, typ, code := http.StatusNotFound, "not_found_error", "unknown_route"
	msg := "no such route: " + r.URL.Path + " (use /{upstream}/v1/...; configured upstreams: " + strings.Join(s.order, ", ") + ")"
	if slices.Contains(fixedRoutes, r.URL.Path) {
		status, typ, code = http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed"
		msg = "method " + r.Method + " is not allowed on " + r.URL.Path + " (allowed: GET, HEAD)"
		w.Header().Set("Allow", "GET, HEAD")
	}
	body, _ := json.Marshal(map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": msg, "param": nil, "code": code},
	})
	frontdoor.WriteEnvelope(w, frontdoor.Problem{Status: status}, body)
}
