package server

import (
	"encoding/json"
	"net/http"
)

// The operator's routes: GET /v1/status and GET /v1/status/history read
// the operator view (internal/opsview); the server authenticates the
// caller, hides from a client that is not an admin what only an admin may
// see, and writes the JSON.

// serveStatus answers GET /v1/status. It reveals queue and quota state but
// no keys; with clients configured it needs a client key.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.authenticate(r.Header)
	if !ok {
		writeStatusUnauthorized(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	st := s.view.Status(r.Context())
	st.ForCaller(cl.Name, cl.Admin)
	_ = enc.Encode(st)
}

// serveHistory answers GET /v1/status/history (same access as /v1/status).
func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authenticate(r.Header); !ok {
		writeStatusUnauthorized(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.view.History())
}

func writeStatusUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid or missing Sluice client key"}}`))
}
