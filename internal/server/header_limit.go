package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
)

// headerCeilingFactor sets http.Server's MaxHeaderBytes to this many times
// max_header_bytes. Go's server answers headers over its own limit with a
// plain-text 431 before any handler runs; the headroom lets a request
// over max_header_bytes (but under the ceiling) reach limitHeaders, which
// answers it in JSON. Only headers beyond the ceiling still get Go's
// plain-text answer. The headroom costs memory only for the requests that
// send such headers.
const headerCeilingFactor = 4

// headerCeiling is the http.Server's MaxHeaderBytes for a configured
// max_header_bytes of limit.
func headerCeiling(limit int) int { return headerCeilingFactor * limit }

// limitHeaders answers 431 in JSON to a request whose request line and
// headers exceed limit bytes (as sent: "Name: value\r\n" per value), in
// the error shape of the upstream the path names (the Anthropic envelope
// elsewhere, as the jobs API's); else it serves next.
func (s *Server) limitHeaders(limit int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := headerSize(r)
		if n <= limit {
			next.ServeHTTP(w, r)
			return
		}
		p := llm.Anthropic
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if u, ok := s.upstreams[name]; ok {
			p = u.cfg.Protocol
		}
		// The body is not read: the connection is not reused.
		w.Header().Set("Connection", "close")
		frontdoor.WriteProblem(w, p, frontdoor.NewRequestID(), frontdoor.Problem{Status: http.StatusRequestHeaderFieldsTooLarge,
			Type:    "invalid_request_error",
			Message: fmt.Sprintf("request line and headers are %d bytes, over the gateway's limit of %d (max_header_bytes)", n, limit)})
	})
}

// headerSize is the size of r's request line and headers as sent on
// HTTP/1.1: "METHOD URI PROTO\r\n", "Host: …\r\n" and "Name: value\r\n"
// for each value.
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}
