package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Request headers the scheduled route reads.
const (
	// HeaderPriority picks the class: critical, high, normal, low or 0–3.
	HeaderPriority = "X-Priority"
	// HeaderDeadline bounds queueing and retries: a duration from now
	// ("30s") or an RFC 3339 instant.
	HeaderDeadline = "X-Sluice-Deadline"
	// headerStainlessTimeout is the official SDKs' own per-attempt timeout
	// in seconds; used as the deadline when X-Sluice-Deadline is absent.
	headerStainlessTimeout = "X-Stainless-Timeout"
)

// serveScheduled handles POST /{upstream}/v1/messages or
// /v1/chat/completions: it reads and prices the body, works out class and
// deadline, hands the request to the engine and relays the answer.
func (s *Server) serveScheduled(w http.ResponseWriter, r *http.Request, u *upstream, cl client, reqID string) {
	p := u.cfg.Protocol
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			s.metrics.request(u.cfg.Name, "", outcomeBadRequest)
			writeProviderError(w, p, reqID, http.StatusRequestEntityTooLarge, "",
				fmt.Sprintf("request body exceeds the gateway's limit of %d bytes (max_body_bytes)", s.cfg.MaxBodyBytes), nil)
			return
		}
		// The client went away or sent a broken body; nothing useful to
		// send upstream.
		s.metrics.request(u.cfg.Name, "", outcomeBadRequest)
		writeProviderError(w, p, reqID, http.StatusBadRequest, "", "reading request body: "+err.Error(), nil)
		return
	}
	req, rerr := s.buildRequest(r, u, cl, body)
	if rerr != nil {
		s.metrics.request(u.cfg.Name, "", outcomeBadRequest)
		writeProviderError(w, p, reqID, rerr.Status, rerr.Type, rerr.Message, nil)
		return
	}
	// The usage chunk we asked for on the client's behalf is stripped from
	// the relayed stream, so clients that index choices[0] do not break.
	var stripUsage bool
	if req.Cost.Stream {
		req.Body, stripUsage = provider.EnsureStreamUsage(p, req.Body)
	}
	resp, err := u.engine.Do(r.Context(), req)
	if err != nil {
		s.writeEngineError(w, r, u, req, reqID, err)
		return
	}
	defer resp.Body.Close()
	// If the client goes away mid-body, close the upstream body at once
	// (a Read blocked on the upstream returns), which ends the attempt.
	stopWatch := context.AfterFunc(r.Context(), func() { _ = resp.Body.Close() })
	defer stopWatch()
	s.metrics.request(u.cfg.Name, req.Priority.String(), outcomeFor(resp.StatusCode))
	var src io.Reader = resp.Body
	if stripUsage && resp.StatusCode/100 == 2 {
		src = provider.NewUsageStripper(resp.Body)
		resp.Header.Del("Content-Length")
	}
	relay(w, r, p, resp.Response, src, resp.QueueWait, resp.Attempts, s.log)
}

// buildRequest turns the HTTP request into a dispatch.Request, or a
// provider-shaped error for the client.
func (s *Server) buildRequest(r *http.Request, u *upstream, cl client, body []byte) (*dispatch.Request, *provider.RequestError) {
	cost, err := provider.Estimate(u.cfg.Protocol, body)
	if err != nil {
		if re, ok := errors.AsType[*provider.RequestError](err); ok {
			return nil, re
		}
		return nil, badRequest("invalid request body: %v", err)
	}
	var requested *llm.Priority
	if v := r.Header.Get(HeaderPriority); v != "" {
		pr, err := llm.ParsePriority(v)
		if err != nil {
			return nil, badRequest("%s header: %v", HeaderPriority, err)
		}
		requested = &pr
	}
	deadline, err := parseDeadline(r.Header, s.clock.Now())
	if err != nil {
		return nil, badRequest("%v", err)
	}
	h := r.Header.Clone()
	removeHopByHop(h)
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	for _, k := range sluiceRequestHeaders {
		h.Del(k)
	}
	h.Del("Content-Length")
	return &dispatch.Request{
		Method:   http.MethodPost,
		Path:     u.scheduledPath(),
		Header:   h,
		Body:     body,
		Priority: clientPriority(cl, requested),
		Client:   cl.name,
		Deadline: deadline,
		Cost:     cost,
	}, nil
}

func badRequest(format string, args ...any) *provider.RequestError {
	return &provider.RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

// parseDeadline reads X-Sluice-Deadline (a positive Go duration from now,
// or an RFC 3339 instant); without it, the SDKs' X-Stainless-Timeout
// (seconds) bounds the wait, since the SDK gives up after that anyway. A
// malformed X-Stainless-Timeout is ignored: it is not ours to police.
// Zero means no deadline (the class's max wait applies).
func parseDeadline(h http.Header, now time.Time) (time.Time, error) {
	if v := strings.TrimSpace(h.Get(HeaderDeadline)); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			if d <= 0 {
				return time.Time{}, fmt.Errorf("%s header: duration %q must be positive", HeaderDeadline, v)
			}
			return now.Add(d), nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s header: %q is neither a duration (30s, 2m) nor an RFC 3339 time", HeaderDeadline, v)
		}
		return t, nil
	}
	if v := strings.TrimSpace(h.Get(headerStainlessTimeout)); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err == nil && secs > 0 && secs < 24*3600 {
			return now.Add(time.Duration(secs * float64(time.Second))), nil
		}
	}
	return time.Time{}, nil
}

// writeEngineError answers a request the engine did not complete.
func (s *Server) writeEngineError(w http.ResponseWriter, r *http.Request, u *upstream, req *dispatch.Request, reqID string, err error) {
	p := u.cfg.Protocol
	prio := req.Priority.String()
	if de, ok := errors.AsType[*dispatch.Error](err); ok {
		s.metrics.request(u.cfg.Name, prio, outcomeGaveUp)
		status := de.Status
		if status < 400 || status > 599 {
			status = http.StatusServiceUnavailable
		}
		msg := de.Message
		if msg == "" && de.Reason != nil {
			msg = de.Reason.Error()
		}
		h := http.Header{}
		if de.RetryAfter > 0 {
			secs := int64((de.RetryAfter + time.Second - 1) / time.Second)
			h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			h.Set("Retry-After-Ms", strconv.FormatInt(max(de.RetryAfter.Milliseconds(), 1), 10))
		}
		setSluiceHeaders(h, de.QueueWait, de.Attempts)
		writeProviderError(w, p, reqID, status, de.Type, msg, h)
		return
	}
	if r.Context().Err() != nil {
		// The client went away; nobody is listening for an answer.
		s.metrics.request(u.cfg.Name, prio, outcomeCanceled)
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, dispatch.ErrStopped) {
		s.metrics.request(u.cfg.Name, prio, outcomeGaveUp)
		writeProviderError(w, p, reqID, http.StatusServiceUnavailable, "", "the gateway is shutting down; retry shortly", nil)
		return
	}
	s.metrics.request(u.cfg.Name, prio, outcomeError)
	s.log.Error("upstream request failed", "upstream", u.cfg.Name, "request_id", reqID, "err", err)
	writeProviderError(w, p, reqID, http.StatusBadGateway, "", "the gateway could not complete the upstream request (request id "+reqID+")", nil)
}
