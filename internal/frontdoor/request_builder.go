package frontdoor

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Caller is who sends a request, as its front door knows it.
type Caller struct {
	// Name identifies the caller for fairness inside a class.
	Name string
	// DefaultPriority is the class of a request that names none.
	DefaultPriority llm.Priority
	// MaxPriority is the most urgent class the caller may use; a more
	// urgent request is lowered to it.
	MaxPriority llm.Priority
}

// Cap lowers p to the caller's MaxPriority when p is more urgent.
func (c Caller) Cap(p llm.Priority) llm.Priority {
	if c.MaxPriority.Valid() && p < c.MaxPriority {
		return c.MaxPriority
	}
	return p
}

// InProcess is the caller of the in-process Transport: normal by default,
// any class allowed.
var InProcess = Caller{DefaultPriority: llm.Normal, MaxPriority: llm.Critical}

// Override holds what the Go API sets outside the headers: the context
// values of WithPriority and WithClient, or a stored job's own fields.
// Each takes precedence over the matching header when set.
type Override struct {
	// Priority, when not nil, replaces X-Priority and the caller's default
	// (still capped at the caller's MaxPriority).
	Priority *llm.Priority
	// Client, when not empty, replaces the caller's name.
	Client string
	// Deadline, when not zero, replaces X-Sluice-Deadline and
	// X-Stainless-Timeout.
	Deadline time.Time
}

// Input is one request as a front door received it.
type Input struct {
	// Protocol is the upstream's wire protocol.
	Protocol llm.Protocol
	// Method is the HTTP method; empty means POST.
	Method string
	// Path is the upstream path with its query ("/v1/messages?beta=true").
	Path string
	// Header is the client's request headers; nil means none.
	Header http.Header
	// Body is the provider request body.
	Body []byte
	// Caller is the authenticated caller (InProcess for the Transport).
	Caller Caller
	// Override is set by the Go API's context or a stored job.
	Override Override
	// Now is the time relative deadlines count from.
	Now time.Time
	// RequestID, when not empty, is sent upstream as X-Sluice-Request-Id
	// (the client's own X-Sluice-* headers are dropped first).
	RequestID string
}

// Build turns in into the request the engine runs, or a provider-shaped
// request error (status 400, the protocol's invalid_request_error) when
// the body, X-Priority or X-Sluice-Deadline is invalid. In order:
//
//  1. the method and path name an endpoint Sluice schedules
//     (provider.EndpointOf and Endpoint.Scheduled: chat, plus the OpenAI
//     Responses and embeddings APIs; a prefix before /v1/ is allowed), and
//     the body is priced for it (provider.EstimateFor) and must be a valid
//     request;
//  2. the headers are cleaned for upstream use (CleanHeader);
//  3. the priority is Override.Priority, else X-Priority, else the
//     caller's default, then lowered to the caller's MaxPriority; an
//     invalid X-Priority is an error even when overridden;
//  4. the deadline is Override.Deadline, else X-Sluice-Deadline, else
//     X-Stainless-Timeout (ignored when malformed), else none;
//  5. Input.RequestID, when set, is sent as X-Sluice-Request-Id;
//  6. an OpenAI chat completions stream that did not ask for usage is asked for it
//     (provider.EnsureStreamUsage) so the quota is reconciled, and the
//     request is marked so PrepareResponse strips that chunk again.
func Build(in Input) (*dispatch.Request, *provider.RequestError) {
	method := in.Method
	if method == "" {
		method = http.MethodPost
	}
	path, _, _ := strings.Cut(in.Path, "?")
	ep, ok := provider.EndpointOf(in.Protocol, path)
	if !ok || !ep.Scheduled() || method != http.MethodPost {
		return nil, &provider.RequestError{Status: http.StatusNotFound, Type: "not_found_error",
			Message: fmt.Sprintf("Sluice schedules POST %s on a %s upstream; %s %s is not one of them",
				strings.Join(provider.ScheduledPaths(in.Protocol), ", "), in.Protocol, method, path)}
	}
	cost, err := provider.EstimateFor(in.Protocol, ep, in.Body, nil)
	if err != nil {
		if re, ok := errors.AsType[*provider.RequestError](err); ok {
			return nil, re
		}
		return nil, badRequest("invalid request body: %v", err)
	}
	prio, err := priority(in.Header, in.Caller, in.Override.Priority)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	deadline := in.Override.Deadline
	if dl, err := ParseDeadline(in.Header, in.Now); err != nil {
		return nil, badRequest("%v", err)
	} else if deadline.IsZero() {
		deadline = dl
	}
	if !deadline.IsZero() && !deadline.After(in.Now) {
		// Nothing can be done for it: the caller's mistake, not a wait.
		return nil, badRequest("the request's deadline (%s) is already past", deadline.UTC().Format(time.RFC3339Nano))
	}
	client := in.Override.Client
	if client == "" {
		client = in.Caller.Name
	}
	req := &dispatch.Request{
		Method:   method,
		Endpoint: ep,
		Path:     in.Path,
		Header:   CleanHeader(in.Header),
		Body:     in.Body,
		Priority: prio,
		Client:   client,
		Deadline: deadline,
		Cost:     cost,
		Session:  strings.TrimSpace(in.Header.Get(HeaderSession)),
	}
	if in.RequestID != "" {
		req.Header.Set(HeaderRequestID, in.RequestID)
	}
	if cost.Stream && ep == provider.EndpointChat {
		req.Body, req.UsageInjected = provider.EnsureStreamUsage(in.Protocol, req.Body)
	}
	return req, nil
}

// BuildCountTokens turns in, a token-counting request (Anthropic POST
// /v1/messages/count_tokens, OpenAI POST /v1/responses/input_tokens), into
// the request the engine's Dispatcher.CountTokens sends: its body must be
// a valid counting request (provider.EstimateFor checks it; its Cost
// charges nothing, but names the previous_response_id whose key alone can
// count it), the headers are cleaned as Build cleans them, and the
// deadline is read the same way; the class only bounds the default
// deadline.
func BuildCountTokens(in Input) (*dispatch.Request, *provider.RequestError) {
	cost, err := provider.EstimateFor(in.Protocol, provider.EndpointCountTokens, in.Body, nil)
	if err != nil {
		if re, ok := errors.AsType[*provider.RequestError](err); ok {
			return nil, re
		}
		return nil, badRequest("invalid request body: %v", err)
	}
	prio, err := priority(in.Header, in.Caller, in.Override.Priority)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	deadline := in.Override.Deadline
	if dl, err := ParseDeadline(in.Header, in.Now); err != nil {
		return nil, badRequest("%v", err)
	} else if deadline.IsZero() {
		deadline = dl
	}
	req := &dispatch.Request{Method: cmpOr(in.Method, http.MethodPost), Path: in.Path, Header: CleanHeader(in.Header), Body: in.Body,
		Priority: prio, Client: cmpOr(in.Override.Client, in.Caller.Name), Deadline: deadline,
		Endpoint: provider.EndpointCountTokens, Cost: cost}
	if in.RequestID != "" {
		req.Header.Set(HeaderRequestID, in.RequestID)
	}
	return req, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func badRequest(format string, args ...any) *provider.RequestError {
	return &provider.RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
}

// RequestedPriority is the class a request with headers h from c will be
// queued in, as Build decides it (the caller's default when X-Priority is
// absent or invalid), for operators' views before the body is read.
func RequestedPriority(h http.Header, c Caller) llm.Priority {
	p, err := priority(h, c, nil)
	if err != nil {
		return c.Cap(c.DefaultPriority)
	}
	return p
}

// priority applies step 3 of Build.
func priority(h http.Header, c Caller, override *llm.Priority) (llm.Priority, error) {
	p := c.DefaultPriority
	if v := h.Get(HeaderPriority); v != "" {
		hp, err := llm.ParsePriority(v)
		if err != nil {
			return 0, fmt.Errorf("%s header: %w", HeaderPriority, err)
		}
		p = hp
	}
	if override != nil && override.Valid() {
		p = *override
	}
	if !p.Valid() {
		p = llm.Normal
	}
	return c.Cap(p), nil
}

// ParseDeadline reads X-Sluice-Deadline (a positive Go duration from now,
// or an RFC 3339 instant); without it, the SDKs' X-Stainless-Timeout
// (seconds, in (0, 86400)) bounds the wait, since the SDK gives up after
// that anyway. A malformed X-Stainless-Timeout is ignored: it is not ours
// to police. Zero means no deadline (the class's max wait applies).
func ParseDeadline(h http.Header, now time.Time) (time.Time, error) {
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
	if v := strings.TrimSpace(h.Get(HeaderStainlessTimeout)); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err == nil && secs > 0 && secs < 24*3600 {
			return now.Add(time.Duration(secs * float64(time.Second))), nil
		}
	}
	return time.Time{}, nil
}

// ScheduledPaths lists the provider paths a request of protocol p may be
// sent to through the engine (POST; provider.ScheduledPaths): the paths a
// job or a batch line may name.
func ScheduledPaths(p llm.Protocol) []string { return provider.ScheduledPaths(p) }
