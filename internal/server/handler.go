package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/provider"
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
	// A stream lasts as long as the generation (the upstream's
	// request_timeout bounds it): no server write deadline here.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	rl := &requestLine{id: frontdoor.NewRequestID(), upstream: name, priority: priorityUnknown, start: s.clock.Now()}
	rest := strings.TrimPrefix(r.URL.Path, "/"+name)
	ep, scheduled := provider.ScheduledEndpoint(u.cfg.Protocol, r.Method, rest)
	if scheduled {
		rl.endpoint = ep.String()
	}
	sw := &statusWriter{ResponseWriter: w}
	ctx, span := s.startRequestSpan(r, rl)
	r = r.WithContext(ctx)
	rl.traceID = span.SpanContext().TraceID()
	defer func() { s.endRequestSpan(span, rl, sw.status) }()
	cl, ok := s.authenticate(r.Header)
	if !ok {
		s.outcome(rl, "", outcomeUnauthorized)
		frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, frontdoor.Problem{Status: http.StatusUnauthorized,
			Message: "invalid or missing Sluice client key: send a configured client key as x-api-key or Authorization: Bearer"})
		s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
		return
	}
	rl.client = cl.Name
	if rf, denied := errors.AsType[*admit.RefusalError](s.admit.Permit(cl.Name, name, "")); denied {
		// Not an upstream of this client's (allowed_upstreams): none of
		// its routes, scheduled, batch or pass-through.
		s.outcome(rl, "", outcomeForbidden)
		frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, rf.Problem)
		s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
		return
	}
	if other, foreign := provider.ForeignEndpoint(u.cfg.Protocol, r.Method, rest); foreign {
		// The other protocol's endpoint: a client pointed at the wrong
		// upstream. Passed through it would go unscheduled and unmetered.
		paths := provider.ScheduledPaths(u.cfg.Protocol)
		for i, p := range paths {
			paths[i] = "/" + name + p
		}
		s.outcome(rl, "", outcomeBadRequest)
		frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, frontdoor.Problem{Status: http.StatusNotFound,
			Message: fmt.Sprintf("%s %s is %s, but upstream %s speaks %s: POST %s",
				r.Method, rest, provider.ProtocolAPI(other), name, provider.ProtocolAPI(u.cfg.Protocol), strings.Join(paths, ", "))})
		s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
		return
	}
	if q := s.jobs.Load(); q != nil && q.api.ServesProvider(name, r.Method, rest) {
		// The provider's own batch and files APIs, answered from the job
		// queue: every request of a batch is a job of this client.
		s.serveProviderBatch(sw, r, q, cl, name, rest)
		rl.outcome = outcomeFor(sw.status)
		s.logRequest(r.Context(), slog.LevelDebug, rl, sw.status)
		return
	}
	if scheduled {
		done := s.view.Serving(name, rl.id, rl.client, askedPriority(r, cl), rl.start) // /v1/status's open requests
		s.serveScheduled(sw, r, u, cl, rl, rest)
		done()
		if rl.abandoned != nil {
			// The client left a stream: logged (with the usage the
			// provider bills) once the engine has read on to it.
			go func(status int) {
				<-rl.abandoned.Ended()
				rl.fromResponse(rl.abandoned)
				s.view.StreamAbandoned(rl.upstream, rl.abandoned)
				s.logRequest(context.Background(), slog.LevelInfo, rl, status)
				s.finished(rl)
			}(sw.status)
			return
		}
		s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
		s.finished(rl)
		return
	}
	if u.countsTokens(r.Method, rest) {
		// Token counting: its own bucket, never the messages quota or a
		// budget (count_tokens.go); counted as a pass-through, logged and
		// traced as count_tokens.
		rl.endpoint = provider.EndpointCountTokens.String()
		s.view.CountPassthrough(name)
		r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
		s.serveCountTokens(sw, r, u, cl, rl.id, rest)
		rl.outcome = outcomeFor(sw.status)
		s.logRequest(r.Context(), slog.LevelDebug, rl, sw.status)
		return
	}
	// Pass-through bodies are held to the same limit as scheduled ones.
	if r.ContentLength > s.cfg.MaxBodyBytes {
		frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, frontdoor.Problem{Status: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body exceeds the gateway's limit of %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes)})
		s.logRequest(r.Context(), slog.LevelDebug, rl, sw.status)
		return
	}
	r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBodyBytes)
	if s.admit.Unmetered(cl.Name, r.Method, rest) {
		// A budget is only as good as its meter: a client with a budget
		// may not reach the provider's billable routes unscheduled.
		s.outcome(rl, "", outcomeBudget)
		frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, frontdoor.Problem{Status: http.StatusForbidden, Type: "permission_error",
			Message: fmt.Sprintf("client %s has a spend budget, so only POST %s is served on this upstream (metered); %s %s is not passed through",
				cl.Name, strings.Join(provider.ScheduledPaths(u.cfg.Protocol), ", "), r.Method, rest)})
		s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
		return
	}
	if id, ok := provider.ResponsesPathID(rest); ok {
		// A stored Response created through one of u's fallbacks is
		// reached there, with the key that created it.
		owner := s.responseOwner(r.Context(), u, id)
		if owner != u {
			if _, denied := errors.AsType[*admit.RefusalError](s.admit.Permit(cl.Name, owner.cfg.Name, "")); denied {
				s.outcome(rl, "", outcomeForbidden)
				frontdoor.WriteProblem(sw, u.cfg.Protocol, rl.id, frontdoor.Problem{Status: http.StatusNotFound,
					Message: fmt.Sprintf("response %s was created through upstream %s (a fallback of %s), which client %s may not use",
						id, owner.cfg.Name, name, cl.Name)})
				s.logRequest(r.Context(), slog.LevelInfo, rl, sw.status)
				return
			}
			r = r.Clone(r.Context())
			r.URL.Path, r.URL.RawPath = "/"+owner.cfg.Name+rest, ""
			sw.Header().Set(frontdoor.HeaderUpstream, owner.cfg.Name)
			u = owner
		}
	}
	s.servePassthrough(sw, r, u, rl.id)
	// Not counted in sluice_requests_total; logged at debug only.
	rl.outcome = outcomeFor(sw.status)
	s.logRequest(r.Context(), slog.LevelDebug, rl, sw.status)
}

// askedPriority is the class r will be queued in, for the open requests'
// list (the body is not read yet; a priority set by the body's metadata is
// not seen).
func askedPriority(r *http.Request, cl clients.Client) string {
	return frontdoor.RequestedPriority(r.Header, cl.Caller()).String()
}
