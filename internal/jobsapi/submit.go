package jobsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// ErrUnknownUpstream means a job names an upstream jobs may not use.
var ErrUnknownUpstream = errors.New("unknown upstream")

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = 255

// IdempotencyKeyHeader may carry a job's idempotency key.
const IdempotencyKeyHeader = "Idempotency-Key"

// SubmitRequest is the body of POST /v1/jobs. Only Upstream and Request are
// required.
type SubmitRequest struct {
	Upstream       string          `json:"upstream"`
	Request        json.RawMessage `json:"request"`
	Priority       string          `json:"priority,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Deadline       string          `json:"deadline,omitempty"`
	MaxAttempts    int             `json:"max_attempts,omitempty"`
	WebhookURL     string          `json:"webhook_url,omitempty"`
	// Path is the provider endpoint the request is sent to: one of the
	// upstream protocol's scheduled paths (OpenAI /v1/chat/completions,
	// /v1/responses, /v1/embeddings; Anthropic /v1/messages). Defaults to
	// the protocol's chat path.
	Path string `json:"path,omitempty"`
	// RunID puts the job in a run: jobs submitted one by one as one
	// whole (`sluice batch run` names its run so), listed with GET
	// /v1/jobs?run_id= and canceled together with POST /v1/jobs/cancel
	// (checkRunID). A job met again by its idempotency key keeps the run
	// it was submitted in.
	RunID string `json:"run_id,omitempty"`
	// CustomID names the job within its run (a batch file's custom_id),
	// at most MaxCustomIDLen bytes.
	CustomID string `json:"custom_id,omitempty"`
}

// pathFor is the provider path a protocol's jobs are sent to when they
// name none: its chat endpoint.
func pathFor(p llm.Protocol) string {
	if p == llm.OpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

// checkPath returns the path a job of protocol p asking for path ("": the
// chat path) is sent to, or an error listing the paths it may name.
func checkPath(p llm.Protocol, path string) (string, error) {
	if path == "" {
		return pathFor(p), nil
	}
	paths := frontdoor.ScheduledPaths(p)
	if !slices.Contains(paths, path) {
		return "", fmt.Errorf("path: %q is not an endpoint Sluice schedules on a %s upstream (have %s)", path, p, strings.Join(paths, ", "))
	}
	return path, nil
}

// checkRequest validates a provider request body for upstream, sent to
// path, and returns the model it asks for.
func (a *API) checkRequest(upstream, path string, body []byte) (string, error) {
	p, ok := a.cfg.Protocols[upstream]
	if !ok {
		return "", fmt.Errorf("%w %q (have %s)", ErrUnknownUpstream, upstream, strings.Join(a.upstreams, ", "))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return "", errors.New("request must be a JSON object (the provider request body)")
	}
	model, err := checkBody(p, path, trimmed, a.cfg.Clock.Now())
	if err != nil {
		return "", fmt.Errorf("request: %w", err)
	}
	return model, nil
}

// parseJobOptions validates the shared optional fields.
func (a *API) parseJobOptions(r *http.Request, priority, deadline string, maxAttempts int, webhook string) (llm.Priority, time.Time, int, error) {
	prio := PriorityDefault
	if priority != "" {
		p, err := llm.ParsePriority(priority)
		if err != nil {
			return 0, time.Time{}, 0, fmt.Errorf("priority: %w", err)
		}
		prio = p
	}
	prio = a.cfg.PriorityOf(r, prio)
	var dl time.Time
	if deadline != "" {
		t, err := time.Parse(time.RFC3339, deadline)
		if err != nil {
			return 0, time.Time{}, 0, fmt.Errorf("deadline: want RFC 3339 like 2026-01-02T15:04:05Z, got %q", deadline)
		}
		if !t.After(a.cfg.Clock.Now()) {
			return 0, time.Time{}, 0, fmt.Errorf("deadline %s is already past", deadline)
		}
		dl = t
	}
	if maxAttempts == 0 {
		maxAttempts = a.cfg.MaxAttempts
	}
	if maxAttempts < 1 || maxAttempts > MaxAttemptsMax {
		return 0, time.Time{}, 0, fmt.Errorf("max_attempts must be in [1, %d], got %d", MaxAttemptsMax, maxAttempts)
	}
	if err := a.checkWebhookURL(r.Context(), "webhook_url", webhook); err != nil {
		return 0, time.Time{}, 0, err
	}
	return prio, dl, maxAttempts, nil
}

// checkWebhookURL vets a webhook URL named by field: an absolute http(s)
// URL the gateway may call (Config.WebhookCheck). Empty passes: none.
func (a *API) checkWebhookURL(ctx context.Context, field, raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s must be an absolute http(s) URL, got %q", field, raw)
	}
	if a.cfg.WebhookCheck != nil {
		if err := a.cfg.WebhookCheck(ctx, raw); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	return nil
}

func (a *API) serveSubmit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if !decodeBody(w, r, a.cfg.MaxBodyBytes, &req, "one JSON job") {
		return
	}
	p, err := a.submitParams(r, &req)
	if err != nil {
		if f, ok := errors.AsType[permissionError](err); ok {
			writePermissionError(w, f.error)
			return
		}
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	res, err := a.store.Insert(r.Context(), p)
	if err != nil {
		if errors.Is(err, jobstore.ErrInvalid) {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		a.storeError(w, "queueing the job", err)
		return
	}
	status := http.StatusAccepted
	if res.Existing {
		if res.Job.Upstream != p.Upstream || !bytes.Equal(res.Job.Body, p.Body) {
			writeError(w, http.StatusConflict, "idempotency key %q is already used by job %d with a different request or upstream: use a new key for a new request",
				p.IdempotencyKey, res.Job.ID)
			return
		}
		status = http.StatusOK
	} else {
		a.cfg.Observer.Submitted(p.Upstream, 1)
	}
	w.Header().Set("Location", "/v1/jobs/"+formatID(res.Job.ID))
	writeJSON(w, status, NewJobView(res.Job, false))
}

// permissionError is a submit the caller's client may not make (its allowed
// upstreams and models): a 403, where every other bad submit is a 400.
type permissionError struct{ error }

// submitParams validates a submitted job and returns the store insert it
// is: the upstream and its path, the request (a body the worker can send,
// compacted), what the caller's client may use (a permissionError), the
// idempotency key and the job's options.
func (a *API) submitParams(r *http.Request, req *SubmitRequest) (jobstore.InsertParams, error) {
	var p jobstore.InsertParams
	if req.Upstream == "" {
		return p, fmt.Errorf("upstream is required (have %s)", strings.Join(a.upstreams, ", "))
	}
	if len(req.Request) == 0 || string(req.Request) == "null" {
		return p, errors.New("request is required: the provider request body")
	}
	path := ""
	if proto, ok := a.cfg.Protocols[req.Upstream]; ok {
		var err error
		if path, err = checkPath(proto, req.Path); err != nil {
			return p, err
		}
	}
	model, err := a.checkRequest(req.Upstream, path, req.Request)
	if err != nil {
		return p, err
	}
	if err := a.permit(r, req.Upstream, model); err != nil {
		return p, permissionError{err}
	}
	key, err := idempotencyKey(r, req.IdempotencyKey)
	if err != nil {
		return p, err
	}
	prio, dl, attempts, err := a.parseJobOptions(r, req.Priority, req.Deadline, req.MaxAttempts, req.WebhookURL)
	if err != nil {
		return p, err
	}
	if err := checkRunID(req.RunID); err != nil {
		return p, err
	}
	if len(req.CustomID) > MaxCustomIDLen {
		return p, fmt.Errorf("custom_id longer than %d bytes", MaxCustomIDLen)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, req.Request); err != nil {
		return p, fmt.Errorf("request: %w", err)
	}
	return jobstore.InsertParams{IdempotencyKey: key, Upstream: req.Upstream, Priority: prio, Client: a.cfg.ClientOf(r),
		Path: path, Body: compact.Bytes(), Deadline: dl, MaxAttempts: attempts, WebhookURL: req.WebhookURL,
		RunID: req.RunID, CustomID: req.CustomID, Now: a.cfg.Clock.Now()}, nil
}

// idempotencyKey is a submit's idempotency key: its body's, or the
// Idempotency-Key header's (the two must agree when both are given).
func idempotencyKey(r *http.Request, inBody string) (string, error) {
	key := inBody
	if h := r.Header.Get(IdempotencyKeyHeader); h != "" {
		if key != "" && key != h {
			return "", errors.New("idempotency_key and the Idempotency-Key header differ")
		}
		key = h
	}
	if len(key) > MaxIdempotencyKeyLen {
		return "", fmt.Errorf("idempotency key longer than %d bytes", MaxIdempotencyKeyLen)
	}
	return key, nil
}

// checkBody reports whether body would build into an engine request for
// protocol p, with the front door's own error when it would not, and the
// model it asks for (for the client's allowed models), so a job
// is accepted exactly when its worker can send it (the worker builds its
// call with the same frontdoor.Build).
func checkBody(p llm.Protocol, path string, body []byte, now time.Time) (model string, err error) {
	req, rerr := frontdoor.Build(frontdoor.Input{Protocol: p, Path: path, Body: body, Caller: frontdoor.InProcess, Now: now})
	if rerr != nil {
		return "", rerr
	}
	return req.Cost.Model, nil
}
