package mock

import (
	"net/http"
	"path"
)

// route is one route the mock serves: a net/http.ServeMux pattern
// ("METHOD /path", a {name} matching one path segment) and its handler.
type route struct {
	pattern string
	serve   http.HandlerFunc
}

// routes is every route the mock serves, as docs/mock.md's Endpoints table
// lists them (TestRoutesAreDocumented holds the two together). The
// provider routes check the key themselves; the /mock/ routes need none.
func (s *Server) routes() []route {
	responses := func(w http.ResponseWriter, r *http.Request) { s.handleResponsePath(w, r) }
	batches := func(w http.ResponseWriter, r *http.Request) { s.handleBatchPath(w, r) }
	keys := func(w http.ResponseWriter, r *http.Request) { s.handleKeys(w, r) }
	return []route{
		{"POST /v1/messages", s.handleMessages},
		{"POST /v1/messages/count_tokens", s.handleCountTokens},
		{"POST /v1/chat/completions", s.handleChat},
		{"POST /v1/responses", s.handleResponses},
		{"POST /v1/responses/input_tokens", s.handleInputTokens},
		{"GET /v1/responses/{id}", responses},
		{"DELETE /v1/responses/{id}", responses},
		{"POST /v1/responses/{id}/cancel", responses},
		{"GET /v1/responses/{id}/input_items", responses},
		{"POST /v1/embeddings", s.handleEmbeddings},
		{"POST /v1/messages/batches", batches},
		{"GET /v1/messages/batches", batches},
		{"GET /v1/messages/batches/{id}", batches},
		{"DELETE /v1/messages/batches/{id}", batches},
		{"POST /v1/messages/batches/{id}/cancel", batches},
		{"GET /v1/messages/batches/{id}/results", batches},
		{"POST /v1/files", batches},
		{"GET /v1/files", batches},
		{"GET /v1/files/{id}", batches},
		{"DELETE /v1/files/{id}", batches},
		{"GET /v1/files/{id}/content", batches},
		{"POST /v1/batches", batches},
		{"GET /v1/batches", batches},
		{"GET /v1/batches/{id}", batches},
		{"POST /v1/batches/{id}/cancel", batches},
		{"GET /mock/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) }},
		{"POST /mock/reset", func(w http.ResponseWriter, _ *http.Request) {
			s.Reset()
			writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
		}},
		{"POST /mock/keys/{key}/revoke", keys},
		{"POST /mock/keys/{key}/restore", keys},
	}
}

// newMux registers s.routes.
func (s *Server) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.HandleFunc(rt.pattern, rt.serve)
	}
	return mux
}

// serveHTTP serves r on its route; a path no route has is answered 404,
// a route's path with another method 405, both in the provider's shape
// (notFound), never the ServeMux's plain text or its redirects.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if path.Clean(r.URL.Path) != r.URL.Path {
		s.notFound(w, r, http.StatusNotFound)
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		h.ServeHTTP(w, r)
		return
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		other := r.WithContext(r.Context())
		other.Method = m
		if _, p := s.mux.Handler(other); p != "" {
			s.notFound(w, r, http.StatusMethodNotAllowed)
			return
		}
	}
	s.notFound(w, r, http.StatusNotFound)
}
