package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/storelink"
)

// snapshotter is implemented by engines that can report their state (the
// real dispatcher does).
type snapshotter interface {
	Snapshot() dispatch.Snapshot
}

// ReadyCheckTimeoutDefault bounds each check of GET /readyz.
const ReadyCheckTimeoutDefault = 2 * time.Second

// The states of a ReadyCheck.
const (
	// CheckOK: the component works.
	CheckOK = "ok"
	// CheckDegraded: the component does not work, and the gateway still
	// serves live traffic without it (a store not connected, an upstream
	// of several with its breaker open): readiness holds.
	CheckDegraded = "degraded"
	// CheckFailed: the gateway cannot serve (draining, every upstream's
	// breaker open): readiness fails.
	CheckFailed = "failed"
)

// ReadyCheck is one check of GET /readyz.
type ReadyCheck struct {
	// Name names what was checked: "server", "store", "upstream NAME" or
	// "cluster".
	Name string `json:"name"`
	// OK reports whether the check passed (State is CheckOK).
	OK bool `json:"ok"`
	// Detail says what was found, e.g. "breaker open" or why the store is
	// not connected.
	Detail string `json:"detail,omitempty"`
	// State is CheckOK, CheckDegraded or CheckFailed.
	State string `json:"state"`
}

func check(name, state, detail string) ReadyCheck {
	return ReadyCheck{Name: name, OK: state == CheckOK, State: state, Detail: detail}
}

// ReadyResponse is GET /readyz's body.
type ReadyResponse struct {
	// Ready is true while the gateway can serve live traffic: it is not
	// shutting down and at least one upstream's breaker is not open; the
	// status is then 200, else 503. A store that does not answer
	// degrades the gateway (its check says so) but leaves it ready.
	Ready  bool         `json:"ready"`
	Checks []ReadyCheck `json:"checks"`
}

// serveLivez answers 200 while the process serves HTTP at all.
func (s *Server) serveLivez(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"live":true}` + "\n"))
}

// serveReadyz names each check and its state (docs/deploy.md,
// "Readiness"), and answers 503 only when the gateway cannot serve live
// traffic: it is shutting down, or every upstream's breaker is open. The
// job store and the cluster's shared store are checked too, and a store
// that does not answer is "degraded": live traffic does not need it (the
// jobs API answers 503 meanwhile, the quotas run on the node's
// conservative share), so a load balancer gating on readiness keeps the
// node, and the whole cluster, through a database outage.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	resp := ReadyResponse{Ready: true}
	if s.draining.Load() {
		resp.Checks = append(resp.Checks, check("server", CheckFailed, "shutting down: finishing the requests in flight"))
	}
	resp.Checks = append(resp.Checks, s.storeCheck(r.Context()))
	up := make([]ReadyCheck, 0, len(s.order))
	anyUp := len(s.order) == 0
	for _, name := range s.order {
		c := check("upstream "+name, CheckOK, "breaker closed")
		if sn, ok := s.upstreams[name].engine.(snapshotter); ok {
			snap := sn.Snapshot()
			c.Detail = "breaker " + snap.Breaker.String()
			if snap.Breaker == flow.Open {
				c.OK, c.State = false, CheckDegraded
				c.Detail += ", next probe at " + snap.BreakerReadyAt.UTC().Format(time.RFC3339)
			}
		}
		anyUp = anyUp || c.OK
		up = append(up, c)
	}
	if !anyUp {
		for i := range up {
			up[i].State = CheckFailed // no upstream left to serve
		}
	}
	resp.Checks = append(resp.Checks, up...)
	if c, ok := s.clusterCheck(); ok {
		resp.Checks = append(resp.Checks, c)
	}
	for _, c := range resp.Checks {
		resp.Ready = resp.Ready && c.State != CheckFailed
	}
	status := http.StatusOK
	if !resp.Ready {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

// clusterCheck is /readyz's cluster check: a node whose shared store is
// not connected, or that runs on its fallback share, still serves
// (within its conservative share): degraded, never failed.
func (s *Server) clusterCheck() (ReadyCheck, bool) {
	cs := s.view.ClusterStatus()
	if cs == nil {
		return ReadyCheck{}, false
	}
	c := check("cluster", CheckOK, "sharing quotas as node "+cs.Node)
	if cs.Node != cs.ConfiguredNode && cs.ConfiguredNode != "" {
		c.Detail += " (node_id " + cs.ConfiguredNode + " is in use by another process)"
	}
	state, linked := s.admit.ClusterStoreState()
	switch {
	case linked && state == storelink.Connecting:
		c = check("cluster", CheckDegraded, "shared store not connected yet (connecting in the background): running on a conservative local share (1/expected_nodes of each quota)")
	case cs.Degraded: // a store lost briefly leaves the node its grant until its lease may have ended
		c = check("cluster", CheckDegraded, "shared store unreachable: running on a conservative local share (1/N of each quota)")
	}
	return c, true
}

// storeCheck reads the job store once, bounded by ReadyCheckTimeoutDefault.
// A store not connected yet or not answering is degraded: the jobs API
// waits for it, live traffic does not. The driver's error goes to the
// log, not to the (unauthenticated) caller.
func (s *Server) storeCheck(ctx context.Context) ReadyCheck {
	svc := s.jobs.Load()
	switch {
	case s.cfg.Store == StoreNone && s.store == nil:
		return check("store", CheckOK, "disabled (store: none)")
	case svc == nil && s.jobsLink.Load() != nil:
		_, failed, _ := s.jobsLink.Load().State()
		return check("store", CheckDegraded, fmt.Sprintf("not connected yet (connecting in the background, %d failed attempts): the jobs API answers 503 until it is", failed))
	case svc == nil:
		return check("store", CheckDegraded, "the job queue is not running")
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyCheckTimeoutDefault)
	defer cancel()
	if _, err := svc.Store().PausedUpstreams(ctx); err != nil {
		s.log.Warn("readiness: the job store did not answer", "err", err)
		return check("store", CheckDegraded, "the job store did not answer")
	}
	return check("store", CheckOK, "reachable")
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
