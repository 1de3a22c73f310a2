package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/provider"
)

// HeaderFallback set to "off" on a request keeps it on its upstream.
const HeaderFallback = "X-Sluice-Fallback"

// serveScheduled handles POST /{upstream}/v1/messages or
// /v1/chat/completions: it reads and prices the body, works out class and
// deadline, hands the request to the engine and relays the answer.
func (s *Server) serveScheduled(w http.ResponseWriter, r *http.Request, u *upstream, cl clients.Client, rl *requestLine, rest string) {
	p := u.cfg.Protocol
	reqID := rl.id
	// Reserve the body's bytes before reading it; they are given back
	// when the answer has been relayed and the body is garbage.
	res, err := reserveBody(s.bodyBytes, r)
	if err != nil {
		s.refuseForMemory(w, r, u, rl, err)
		return
	}
	defer res.release()
	body, err := readRequestBody(w, r, res.body(r), s.cfg.MaxBodyBytes)
	if err != nil {
		if errors.Is(err, errBodyBytesFull) {
			s.refuseForMemory(w, r, u, rl, err)
			return
		}
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			s.outcome(rl, "", outcomeBadRequest)
			frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusRequestEntityTooLarge,
				Message: fmt.Sprintf("request body exceeds the gateway's limit of %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes)})
			return
		}
		// The client went away or sent a broken body; nothing useful to
		// send upstream.
		s.outcome(rl, "", outcomeBadRequest)
		frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusBadRequest, Message: "reading request body: " + err.Error()})
		return
	}
	path := rest
	if r.URL.RawQuery != "" {
		path += "?" + r.URL.RawQuery
	}
	req, rerr := frontdoor.Build(frontdoor.Input{
		Protocol: p, Method: r.Method, Path: path, Header: r.Header, Body: body,
		Caller: cl.Caller(), Now: s.clock.Now(), RequestID: reqID,
	})
	if rerr != nil {
		s.outcome(rl, "", outcomeBadRequest)
		pr, _ := frontdoor.ProblemFor(rerr)
		frontdoor.WriteProblem(w, p, reqID, pr)
		return
	}
	s.active.add()
	defer s.active.done()
	// The admission layer: the client's budget at once, its own limit in
	// the upstream's queue, a fallback when the upstream cannot serve it.
	noFallback := strings.EqualFold(strings.TrimSpace(r.Header.Get(HeaderFallback)), "off")
	resp, err := s.admit.Do(r.Context(), u.cfg.Name, req, noFallback, &rl.trail)
	if err != nil {
		s.writeEngineError(w, r, u, req, rl, err)
		return
	}
	rl.spent = admit.SpentOn(resp)
	defer resp.Body.Close()
	// If the client goes away mid-body, close the body at once: the
	// engine reads a stream on to learn what the provider bills
	// (abandoned_stream_drain), any other body ends there.
	stopWatch := context.AfterFunc(r.Context(), func() { _ = resp.Body.Close() })
	defer stopWatch()
	frontdoor.PrepareResponse(req, resp)
	cut := relay(w, r, resp.Response, s.log)
	if _, ended := resp.End(); !ended && provider.IsEventStream(resp.Header) {
		// The relay stopped before the stream's end: its client left.
		// The engine reads on to what the provider bills; the log line
		// waits for it.
		_ = resp.Body.Close()
		rl.abandoned = resp
		s.outcome(rl, req.Priority.String(), outcomeAbandoned)
		return
	}
	s.outcome(rl, req.Priority.String(), outcomeFor(resp.StatusCode))
	rl.fromResponse(resp)
	if cut != "" {
		s.log.Warn("stream cut before its end; the client got an error event", "upstream", u.cfg.Name,
			"request_id", reqID, "priority", req.Priority.String(), "reason", cut)
	}
}

// writeEngineError answers a request the engine did not complete.
func (s *Server) writeEngineError(w http.ResponseWriter, r *http.Request, u *upstream, req *dispatch.Request, rl *requestLine, err error) {
	p := u.cfg.Protocol
	reqID := rl.id
	prio := req.Priority.String()
	if rf, ok := errors.AsType[*admit.RefusalError](err); ok {
		s.outcome(rl, prio, refusalOutcome(rf))
		frontdoor.WriteProblem(w, p, reqID, rf.Problem)
		return
	}
	if _, ok := errors.AsType[*dispatch.Error](err); ok {
		s.outcome(rl, prio, outcomeGaveUp)
		pr, _ := frontdoor.ProblemFor(err)
		pr.Attempts = rl.trail.Attempts(pr.Attempts)
		rl.queue, rl.attempts = pr.QueueWait, pr.Attempts
		frontdoor.WriteProblem(w, p, reqID, pr)
		return
	}
	if errors.Is(context.Cause(r.Context()), dispatch.ErrStopped) || errors.Is(err, dispatch.ErrStopped) {
		// Cut by the shutdown (errShutdown): answered like a request the
		// engine refused for the same reason.
		s.outcome(rl, prio, outcomeGaveUp)
		pr, _ := frontdoor.ProblemFor(&dispatch.Error{Reason: dispatch.ErrStopped, Message: "the gateway is shutting down"})
		frontdoor.WriteProblem(w, p, reqID, pr)
		return
	}
	if r.Context().Err() != nil {
		// The client went away; nobody is listening for an answer.
		s.outcome(rl, prio, outcomeCanceled)
		return
	}
	s.outcome(rl, prio, outcomeError)
	s.log.Error("upstream request failed", "upstream", u.cfg.Name, "request_id", reqID, "err", err)
	frontdoor.WriteProblem(w, p, reqID, frontdoor.Problem{Status: http.StatusBadGateway,
		Message: "the gateway could not complete the upstream request (request id " + reqID + ")"})
}

// refusalOutcome is the outcome of a request the admission layer refused.
func refusalOutcome(rf *admit.RefusalError) string {
	if rf.Reason == admit.RefusedBudget {
		return outcomeBudget
	}
	return outcomeForbidden
}

// refuseForMemory answers a request the request-bytes limit had no room for (or
// whose client left while it waited).
func (s *Server) refuseForMemory(w http.ResponseWriter, r *http.Request, u *upstream, rl *requestLine, err error) {
	if !errors.Is(err, errBodyBytesFull) {
		// The client went away while waiting for room.
		s.outcome(rl, "", outcomeCanceled)
		return
	}
	s.outcome(rl, "", outcomeGaveUp)
	frontdoor.WriteProblem(w, u.cfg.Protocol, rl.id, bodyBytesProblem(s.bodyBytes.Limit()))
}
