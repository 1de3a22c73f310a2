package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/provider"
)

// requestIDKey carries a pass-through request's id to the proxy's ErrorHandler.
type requestIDKey struct{}

// newPassthrough builds the reverse proxy for the paths of u that Sluice
// does not schedule or queue (models, count_tokens, ...; the providers'
// batch and files routes too when the job queue is off): forwarded
// as they are, with the client's credentials swapped for the upstream key,
// streamed with immediate flushes.
func (s *Server) newPassthrough(u *upstream, transport http.RoundTripper) *httputil.ReverseProxy {
	prefix := "/" + u.cfg.Name
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, prefix)
			pr.Out.URL.RawPath = ""
			pr.SetURL(u.target)
			pr.Out.Header = frontdoor.CleanHeader(pr.Out.Header)
			provider.SetUpstreamHeaders(pr.Out.Header, u.cfg.Protocol, u.passKeyFor(pr.In.Context(), pr.Out.URL.Path), false)
			// The request's span (or the client's traceparent) goes on.
			if trace.SpanContextFromContext(pr.In.Context()).IsValid() {
				propagation.TraceContext{}.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
			}
		},
		Transport:     transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			frontdoor.SetSluiceHeaders(resp.Header, 0, 1)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The id of the request's log line, so the two can be matched.
			reqID, _ := r.Context().Value(requestIDKey{}).(string)
			if reqID == "" {
				reqID = frontdoor.NewRequestID()
			}
			if r.Context().Err() != nil {
				return // client gone
			}
			if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
				// A chunked body that outgrew max_body_bytes on the way:
				// the caller's to fix, not a gateway failure to retry.
				frontdoor.WriteProblem(w, u.cfg.Protocol, reqID, frontdoor.Problem{Status: http.StatusRequestEntityTooLarge,
					Message: fmt.Sprintf("request body exceeds the gateway's limit of %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes)})
				return
			}
			// The error may name the upstream URL but never holds the key;
			// it is logged, not sent.
			s.log.Warn("pass-through request failed", "upstream", u.cfg.Name, "path", r.URL.Path, "request_id", reqID, "err", err)
			frontdoor.WriteProblem(w, u.cfg.Protocol, reqID, frontdoor.Problem{Status: http.StatusBadGateway, ShouldRetry: true,
				Message: "the gateway could not reach the upstream (request id " + reqID + ")"})
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// servePassthrough forwards r to the upstream as it is; while the
// provider rejects every key of the pool it answers the upstream's outage
// instead (passOutager), as the scheduled routes do.
func (s *Server) servePassthrough(w http.ResponseWriter, r *http.Request, u *upstream, reqID string) {
	s.view.CountPassthrough(u.cfg.Name)
	if e, ok := u.engine.(passOutager); ok {
		if out := e.PassOutage(); out != nil {
			pr, _ := frontdoor.ProblemFor(out)
			frontdoor.WriteProblem(w, u.cfg.Protocol, reqID, pr)
			return
		}
	}
	u.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, reqID)))
}

// passOutager is an engine that knows when the provider rejects every key
// of its pool (*dispatch.Dispatcher.PassOutage).
type passOutager interface {
	PassOutage() *dispatch.Error
}

var _ passOutager = (*dispatch.Dispatcher)(nil)

// passKeyFor is the key a pass-through request to path is sent with: for
// a stored response (GET or DELETE /v1/responses/{id}, its cancel and
// input_items), the key that created it when the engine knows it (in
// memory, or from the job store: only that key can reach it); else
// passKey.
func (u *upstream) passKeyFor(ctx context.Context, path string) string {
	if id, ok := provider.ResponsesPathID(path); ok {
		if e, ok := u.engine.(responseKeyer); ok {
			if key, ok := e.ResponseKey(ctx, id); ok {
				return key
			}
		}
	}
	return u.passKey()
}

// responseOwner returns the upstream a retrieval of stored Response id
// sent to u is for: u when u created it or no upstream is known to have,
// else the fallback of u (in the order of its fallbacks) that created it:
// a create served by a fallback left its Response there.
func (s *Server) responseOwner(ctx context.Context, u *upstream, id string) *upstream {
	created := func(x *upstream) bool {
		e, ok := x.engine.(responseCreator)
		if !ok {
			return false
		}
		_, ok = e.CreatedResponse(ctx, id)
		return ok
	}
	if created(u) {
		return u
	}
	for _, fb := range u.cfg.Fallbacks {
		if f := s.upstreams[fb.Upstream]; f != nil && created(f) {
			return f
		}
	}
	return u
}

// responseCreator is an engine that knows whether its upstream created a
// stored Response (*dispatch.Dispatcher).
type responseCreator interface {
	CreatedResponse(ctx context.Context, id string) (string, bool)
}

var _ responseCreator = (*dispatch.Dispatcher)(nil)

// responseKeyer is an engine that knows which key created each stored
// Response (*dispatch.Dispatcher).
type responseKeyer interface {
	ResponseKey(ctx context.Context, id string) (string, bool)
}

var _ responseKeyer = (*dispatch.Dispatcher)(nil)

// passKey is the key a pass-through request is sent with: a key of the
// pool that is in (the engine knows), else the first configured.
func (u *upstream) passKey() string {
	if e, ok := u.engine.(interface{ PassKey() string }); ok {
		return e.PassKey()
	}
	return u.cfg.Keys()[0].Key
}
