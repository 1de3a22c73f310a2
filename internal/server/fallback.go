package server

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
)

// HeaderFallback set to "off" on a request keeps it on its upstream.
const HeaderFallback = "X-Sluice-Fallback"

// Fallback reasons, the label of sluice_fallbacks_total.
const (
	fallbackUnavailable = "unavailable" // breaker open, outage
	fallbackDeadline    = "deadline"    // the primary's predicted wait exceeds the deadline
)

// doRouted sends req to u's engine and, when u cannot serve it (its
// breaker is open, it is in an outage, or its predicted queue wait
// exceeds the request's deadline), to u's fallbacks in order, with the
// request's model rewritten by each fallback's models map. Every attempt
// shares the request's one deadline. A response is only ever taken from
// one upstream: Do returns before any byte reaches the client, so a
// stream never switches once it has started. The answer says who served
// it (Response.Upstream). Each engine call goes through send, which
// reserves its worst case against the client's budget at the price of the
// model it is sent as.
func (s *Server) doRouted(ctx context.Context, u *upstream, req *dispatch.Request, h http.Header) (*dispatch.Response, error) {
	if len(u.cfg.Fallbacks) == 0 || strings.EqualFold(strings.TrimSpace(h.Get(HeaderFallback)), "off") ||
		!u.cfg.FallbackClass(req.Priority) {
		return s.send(ctx, u, req)
	}
	if req.Deadline.IsZero() {
		// One end-to-end deadline: the primary's class default, fixed now.
		req.Deadline = s.clock.Now().Add(u.cfg.WithDefaults().Classes.Get(req.Priority).MaxWait)
	}
	first := *req
	first.FailFast = true
	resp, err := s.send(ctx, u, &first)
	reason := fallbackReason(err, u)
	if reason == "" {
		return resp, err
	}
	for i, f := range u.cfg.Fallbacks {
		fu := s.upstreams[f.Upstream]
		if fu == nil || ctx.Err() != nil {
			continue
		}
		next := *req
		next.Body = frontdoor.RewriteModel(req.Body, f.Models)
		if to, ok := f.Models[req.Cost.Model]; ok {
			next.Cost.Model = to // priced as the model it is sent as
		}
		next.FailFast = i < len(u.cfg.Fallbacks)-1
		s.metrics.fallbackTaken(u.cfg.Name, f.Upstream, reason)
		fresp, ferr := s.send(ctx, fu, &next)
		if ferr == nil {
			return fresp, nil
		}
		if fallbackReason(ferr, fu) == "" {
			return nil, ferr // the fallback's own answer
		}
	}
	return nil, err // the primary's
}

// fallbackReason says why err lets a request fall back ("" when it does
// not): nothing reached the client and the upstream is unavailable or
// cannot make the deadline.
func fallbackReason(err error, u *upstream) string {
	var de *dispatch.Error
	if err == nil || !errors.As(err, &de) {
		return ""
	}
	switch {
	case errors.Is(de, dispatch.ErrUnavailable):
		return fallbackUnavailable
	case errors.Is(de, dispatch.ErrShed):
		return fallbackDeadline
	case (errors.Is(de, dispatch.ErrRetriesExhausted) || errors.Is(de, dispatch.ErrRetryBudget)) &&
		de.Status == dispatch.OutageStatus(u.cfg.Protocol):
		return fallbackUnavailable
	}
	return ""
}
