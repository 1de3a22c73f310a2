package server

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/frontdoor"
)

// serveUpstream handles everything under /{upstream}/: authentication, then
// the scheduled route through the engine or a pass-through to the provider.
func (s *Server) serveUpstream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("upstream")
	u, ok := s.upstreams[name]
	if !ok {
		s.serveNotFound(w, r)
		return
	}
	reqID := frontdoor.NewRequestID()
	cl, ok := s.clients.authenticate(r.Header)
	if !ok {
		s.metrics.request(name, "", outcomeUnauthorized)
		frontdoor.WriteProblem(w, u.cfg.Protocol, reqID, frontdoor.Problem{Status: http.StatusUnauthorized,
			Message: "invalid or missing Sluice client key: send a configured client key as x-api-key or Authorization: Bearer"})
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/"+name)
	if r.Method == http.MethodPost && rest == u.scheduledPath() {
		s.serveScheduled(w, r, u, cl, reqID, rest)
		return
	}
	s.servePassthrough(w, r, u)
}
