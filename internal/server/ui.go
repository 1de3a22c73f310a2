package server

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The dashboard: plain HTML, CSS and JavaScript embedded in the binary (no
// build step, no CDN: it works offline). It polls /v1/status and
// /v1/status/history (internal/opsview's read model) and draws its charts
// with uPlot, vendored under ui/vendor/uplot (`make ui-vendor` refreshes
// it from npm). Reading needs what /v1/status needs; actions (requeue,
// cancel, breaker) send the admin key the page asks for.

//go:embed ui
var uiFiles embed.FS

// uiFS is the ui directory's contents.
func uiFS() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil { // the directory is embedded above
		panic(err)
	}
	return sub
}

// serveUI answers GET /ui with the dashboard's page.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(uiFS(), "index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; script-src 'self'")
	_, _ = w.Write(b)
}

// uiAssets serves the dashboard's files under /ui/; a missing one gets the
// gateway's JSON 404 like any unknown path.
func (s *Server) uiAssets() http.Handler {
	files := http.StripPrefix("/ui/", http.FileServerFS(uiFS()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		if name == "" {
			s.serveUI(w, r)
			return
		}
		if st, err := fs.Stat(uiFS(), name); err != nil || st.IsDir() {
			s.serveNotFound(w, r)
			return
		}
		files.ServeHTTP(w, r)
	})
}
