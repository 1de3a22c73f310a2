package server

import (
	"crypto/sha256"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/clients"
)

// authenticate identifies the caller of a request from the key it sent
// (clientKey) among the clients in force (clients.Set.Authenticate).
func (s *Server) authenticate(h http.Header) (clients.Client, bool) {
	return s.clients.Set().Authenticate(clientKey(h))
}

// clientKey returns the key the client sent, x-api-key first.
func clientKey(h http.Header) string {
	if k := strings.TrimSpace(h.Get("X-Api-Key")); k != "" {
		return k
	}
	auth := strings.TrimSpace(h.Get("Authorization"))
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// requireAdmin lets only admin callers through to next: 401 without a
// valid key, 403 (permission_error) for a client that is not an admin.
// With no clients configured every caller is an admin.
func (s *Server) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cl, ok := s.authenticate(r.Header)
		if !ok {
			writeJobsError(w, http.StatusUnauthorized, "authentication_error", "invalid or missing Sluice client key")
			return
		}
		if !cl.Admin {
			writeJobsError(w, http.StatusForbidden, "permission_error",
				"this route needs an admin client key (role: admin); client "+cl.Name+" is not an admin")
			return
		}
		next(w, r)
	}
}

// callerOf returns the client a jobs request was authenticated as.
func callerOf(r *http.Request) (clients.Client, bool) {
	cl, ok := r.Context().Value(jobClientKey{}).(clients.Client)
	return cl, ok
}

func sha256Sum(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
