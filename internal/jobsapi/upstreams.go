package jobsapi

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/jobstore"
)

func (a *API) servePause(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if action != "pause" && action != "resume" {
		writeError(w, http.StatusNotFound, "no route %s %s (want pause or resume)", r.Method, r.URL.Path)
		return
	}
	if !a.admin(r) {
		forbidden(w, "pausing or resuming an upstream")
		return
	}
	if _, ok := a.cfg.Protocols[name]; !ok {
		writeError(w, http.StatusBadRequest, "unknown upstream %q (have %s)", name, strings.Join(a.upstreams, ", "))
		return
	}
	if err := a.store.SetPaused(r.Context(), jobstore.PauseParams{Upstream: name, Paused: action == "pause", Now: a.cfg.Clock.Now()}); err != nil {
		a.storeError(w, "pausing the upstream", err)
		return
	}
	// An operator's act that stops (or restarts) a whole upstream's jobs:
	// the log says who did it.
	msg := "job queue paused for upstream"
	if action == "resume" {
		msg = "job queue resumed for upstream"
	}
	a.cfg.Logger.Info(msg, "upstream", name, "client", a.cfg.ClientOf(r))
	writeJSON(w, http.StatusOK, map[string]any{"upstream": name, "paused": action == "pause"})
}

func (a *API) servePaused(w http.ResponseWriter, r *http.Request) {
	names, err := a.store.PausedUpstreams(r.Context())
	if err != nil {
		a.storeError(w, "listing paused upstreams", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": append([]string{}, names...)})
}
