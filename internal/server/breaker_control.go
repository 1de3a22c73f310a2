package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/frontdoor"
)

// breakerForcer is implemented by engines whose breaker an operator can
// reset or open (*dispatch.Dispatcher).
type breakerForcer interface {
	ForceBreaker(action, by string) (from, to flow.BreakerState, err error)
}

// BreakerRequest is the body of POST /v1/upstreams/{name}/breaker.
type BreakerRequest struct {
	// Action is "reset" (close the breaker, e.g. after a fix) or "open"
	// (open it and hold it open, e.g. during a known provider incident,
	// until a reset).
	Action string `json:"action"`
}

// BreakerResponse answers it.
type BreakerResponse struct {
	Upstream string `json:"upstream"`
	Action   string `json:"action"`
	From     string `json:"from"`
	Breaker  string `json:"breaker"`
	Held     bool   `json:"held"`
}

// serveBreaker answers POST /v1/upstreams/{name}/breaker (admin only,
// behind requireAdmin): it resets or opens the upstream's breaker by hand.
// The change is logged and kept in the breaker's history (/v1/status).
func (s *Server) serveBreaker(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	u, ok := s.upstreams[name]
	if !ok {
		writeControlError(w, http.StatusNotFound, "not_found_error",
			"unknown upstream "+name+" (configured: "+strings.Join(s.order, ", ")+")")
		return
	}
	var req BreakerRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeControlError(w, http.StatusBadRequest, "invalid_request_error", "reading the body: "+err.Error())
		return
	}
	f, ok := u.engine.(breakerForcer)
	if !ok {
		writeControlError(w, http.StatusNotImplemented, "api_error", "upstream "+name+" has no breaker to control")
		return
	}
	by := "unknown"
	if cl, ok := s.authenticate(r.Header); ok {
		by = cl.Name
	}
	from, to, err := f.ForceBreaker(req.Action, by)
	if err != nil {
		writeControlError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	s.log.Warn("circuit breaker set by an operator", "upstream", name, "action", req.Action,
		"from", from.String(), "to", to.String(), "client", by)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(BreakerResponse{Upstream: name, Action: req.Action, From: from.String(), Breaker: to.String(),
		Held: req.Action == "open"})
}

// writeControlError writes an error of the control routes in the JSON
// shape both SDK families read.
func writeControlError(w http.ResponseWriter, status int, typ, msg string) {
	body, _ := json.Marshal(map[string]any{
		"type":  "error",
		"error": map[string]any{"type": typ, "message": msg, "param": nil, "code": nil},
	})
	frontdoor.WriteEnvelope(w, frontdoor.Problem{Status: status}, body)
}
