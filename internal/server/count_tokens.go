package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/provider"
)

// tokenCounter is an engine that counts tokens on its own bucket
// (dispatch.Dispatcher.CountTokens).
type tokenCounter interface {
	CountTokens(ctx context.Context, req *dispatch.Request) (*dispatch.Response, error)
}

// countsTokens reports whether rest is u's token-counting route and its
// engine counts tokens: Anthropic POST /v1/messages/count_tokens, OpenAI
// POST /v1/responses/input_tokens.
func (u *upstream) countsTokens(method, rest string) bool {
	if method != http.MethodPost {
		return false
	}
	if e, ok := provider.EndpointOf(u.cfg.Protocol, rest); !ok || e != provider.EndpointCountTokens {
		return false
	}
	_, ok := u.engine.(tokenCounter)
	return ok
}

// serveCountTokens forwards a token-counting request through the engine's
// own counting bucket: never the model endpoints' queue, quota or
// budgets. The client sees the provider's answer, or a 429 in the
// protocol's shape with retry-after when no key's counting bucket has
// room before its deadline.
func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request, u *upstream, cl clients.Client, reqID, rest string) {
	p := u.cfg.Protocol
	body, err := readRequestBody(w, r, r.Body, s.cfg.MaxBodyBytes)
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body exceeds the gateway's limit of %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes)})
			return
		}
		frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusBadRequest, Message: "reading request body: " + err.Error()})
		return
	}
	path := rest
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	req, rerr := frontdoor.BuildCountTokens(frontdoor.Input{Protocol: p, Method: r.Method, Path: path, Header: r.Header, Body: body,
		Caller: cl.Caller(), Now: s.clock.Now(), RequestID: reqID})
	if rerr != nil {
		pr, _ := frontdoor.ProblemFor(rerr)
		frontdoor.WriteProblem(w, p, reqID, pr)
		return
	}
	resp, err := u.engine.(tokenCounter).CountTokens(r.Context(), req)
	if err != nil {
		if _, ok := errors.AsType[*dispatch.Error](err); ok {
			pr, _ := frontdoor.ProblemFor(err)
			frontdoor.WriteProblem(w, p, reqID, pr)
			return
		}
		if r.Context().Err() != nil {
			return // the client left
		}
		s.log.Warn("token counting failed", "upstream", u.cfg.Name, "request_id", reqID, "err", err)
		frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusBadGateway, ShouldRetry: true,
			Message: "the gateway could not reach the upstream (request id " + reqID + ")"})
		return
	}
	defer resp.Body.Close()
	h := resp.Header
	frontdoor.RemoveHopByHop(h)
	frontdoor.SetSluiceHeaders(h, resp.QueueWait, resp.Attempts)
	h.Set(frontdoor.HeaderUpstream, resp.Upstream)
	h.Set(frontdoor.HeaderKey, resp.Key)
	h.Set(frontdoor.HeaderRequestID, reqID)
	relay(w, r, resp.Response, s.log)
}
