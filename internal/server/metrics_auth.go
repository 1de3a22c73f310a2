package server

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
)

// MetricsConfig guards GET /metrics, which names every client and shows
// each one's spend and remaining budget: with clients configured it needs
// an admin client's key, or the scrape key, unless Public is set
// (docs/security.md).
type MetricsConfig struct {
	// Public serves /metrics to anyone, for a Prometheus on a private
	// network that cannot send a key. Defaults to false.
	Public bool `yaml:"public"`
	// ScrapeKey is a key that may read /metrics and nothing else, sent as
	// Authorization: Bearer (Prometheus's authorization.credentials) or
	// x-api-key; give it as ${SLUICE_SCRAPE_KEY} so the file holds no
	// secret. Defaults to none (an admin client's key only).
	ScrapeKey string `yaml:"scrape_key"`
}

// ScrapeKeyMinLen is the shortest scrape key accepted.
const ScrapeKeyMinLen = 16

func (m MetricsConfig) validate() error {
	switch {
	case m.Public && m.ScrapeKey != "":
		return errors.New("scrape_key: not used with public: true (remove one)")
	case m.ScrapeKey != "" && len(strings.TrimSpace(m.ScrapeKey)) < ScrapeKeyMinLen:
		return errors.New("scrape_key: must be at least 16 characters")
	}
	return nil
}

// serveMetrics answers GET /metrics to whoever may read it: anyone on an
// open gateway (no clients) or with metrics.public, otherwise the scrape
// key or an admin client's key; 401 without one, 403 for a client that
// is not an admin.
func (s *Server) serveMetrics(next http.Handler) http.HandlerFunc {
	scrape := sha256Sum(s.cfg.Metrics.ScrapeKey)
	return func(w http.ResponseWriter, r *http.Request) {
		cs := s.clients.Set()
		if s.cfg.Metrics.Public || cs.Open() {
			next.ServeHTTP(w, r)
			return
		}
		if key := clientKey(r.Header); s.cfg.Metrics.ScrapeKey != "" && key != "" {
			d := sha256Sum(key)
			if subtle.ConstantTimeCompare(d[:], scrape[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		cl, ok := cs.Authenticate(clientKey(r.Header))
		if !ok {
			writeJobsError(w, http.StatusUnauthorized, "authentication_error",
				"/metrics needs an admin client key or the scrape key (metrics.scrape_key); see docs/security.md")
			return
		}
		if !cl.Admin {
			writeJobsError(w, http.StatusForbidden, "permission_error",
				"/metrics needs an admin client key (role: admin) or the scrape key; client "+cl.Name+" is not an admin")
			return
		}
		next.ServeHTTP(w, r)
	}
}
