package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = 255

// IdempotencyKeyHeader may carry a job's idempotency key.
const IdempotencyKeyHeader = "Idempotency-Key"

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", s.serveSubmit)
	mux.HandleFunc("GET /v1/jobs", s.serveList)
	mux.HandleFunc("GET /v1/jobs/{id}", s.serveGet)
	mux.HandleFunc("DELETE /v1/jobs/{id}", s.serveCancel)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.serveCancel)
	mux.HandleFunc("POST /v1/jobs/{id}/retry", s.serveRetry)
	mux.HandleFunc("POST /v1/jobs/{id}/webhook/redeliver", s.serveRedeliver)
	mux.HandleFunc("POST /v1/jobs/retry", s.serveRetryBulk)
	mux.HandleFunc("POST /v1/upstreams/{name}/{action}", s.servePause)
	mux.HandleFunc("GET /v1/upstreams/paused", s.servePaused)
	mux.HandleFunc("POST /v1/batches", s.serveBatchCreate)
	mux.HandleFunc("GET /v1/batches/{id}", s.serveBatchGet)
	mux.HandleFunc("GET /v1/batches/{id}/results", s.serveBatchResults)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.serveBatchCancel)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
	return mux
}

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
}

// pathFor is the provider path a protocol's jobs are sent to.
func pathFor(p llm.Protocol) string {
	if p == llm.OpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

// checkRequest validates a provider request body for upstream.
func (s *Service) checkRequest(upstream string, body []byte) error {
	p, ok := s.cfg.Protocols[upstream]
	if !ok {
		return fmt.Errorf("%w %q (have %s)", ErrUnknownUpstream, upstream, strings.Join(s.upstreams, ", "))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return errors.New("request must be a JSON object (the provider request body)")
	}
	if err := checkBody(p, trimmed, s.cfg.Clock.Now()); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	return nil
}

// parseJobOptions validates the shared optional fields.
func (s *Service) parseJobOptions(r *http.Request, priority, deadline string, maxAttempts int, webhook string) (llm.Priority, time.Time, int, error) {
	prio := PriorityDefault
	if priority != "" {
		p, err := llm.ParsePriority(priority)
		if err != nil {
			return 0, time.Time{}, 0, fmt.Errorf("priority: %w", err)
		}
		prio = p
	}
	prio = s.cfg.PriorityOf(r, prio)
	var dl time.Time
	if deadline != "" {
		t, err := time.Parse(time.RFC3339, deadline)
		if err != nil {
			return 0, time.Time{}, 0, fmt.Errorf("deadline: want RFC 3339 like 2026-01-02T15:04:05Z, got %q", deadline)
		}
		if !t.After(s.cfg.Clock.Now()) {
			return 0, time.Time{}, 0, fmt.Errorf("deadline %s is already past", deadline)
		}
		dl = t
	}
	if maxAttempts == 0 {
		maxAttempts = s.cfg.MaxAttempts
	}
	if maxAttempts < 1 || maxAttempts > MaxAttemptsMax {
		return 0, time.Time{}, 0, fmt.Errorf("max_attempts must be in [1, %d], got %d", MaxAttemptsMax, maxAttempts)
	}
	if webhook != "" {
		u, err := url.Parse(webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return 0, time.Time{}, 0, fmt.Errorf("webhook_url must be an absolute http(s) URL, got %q", webhook)
		}
		if s.cfg.WebhookCheck != nil {
			if err := s.cfg.WebhookCheck(r.Context(), webhook); err != nil {
				return 0, time.Time{}, 0, fmt.Errorf("webhook_url: %w", err)
			}
		}
	}
	return prio, dl, maxAttempts, nil
}

func (s *Service) serveSubmit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	if !decodeBody(w, r, s.cfg.MaxBodyBytes, &req, "one JSON job") {
		return
	}
	if req.Upstream == "" {
		writeError(w, http.StatusBadRequest, "upstream is required (have %s)", strings.Join(s.upstreams, ", "))
		return
	}
	if len(req.Request) == 0 || string(req.Request) == "null" {
		writeError(w, http.StatusBadRequest, "request is required: the provider request body")
		return
	}
	if err := s.checkRequest(req.Upstream, req.Request); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	key := req.IdempotencyKey
	if h := r.Header.Get(IdempotencyKeyHeader); h != "" {
		if key != "" && key != h {
			writeError(w, http.StatusBadRequest, "idempotency_key and the Idempotency-Key header differ")
			return
		}
		key = h
	}
	if len(key) > MaxIdempotencyKeyLen {
		writeError(w, http.StatusBadRequest, "idempotency key longer than %d bytes", MaxIdempotencyKeyLen)
		return
	}
	prio, dl, attempts, err := s.parseJobOptions(r, req.Priority, req.Deadline, req.MaxAttempts, req.WebhookURL)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, req.Request); err != nil {
		writeError(w, http.StatusBadRequest, "request: %v", err)
		return
	}
	res, err := s.store.Insert(r.Context(), jobstore.InsertParams{
		IdempotencyKey: key,
		Upstream:       req.Upstream,
		Priority:       prio,
		Client:         s.cfg.ClientOf(r),
		Path:           pathFor(s.cfg.Protocols[req.Upstream]),
		Body:           compact.Bytes(),
		Deadline:       dl,
		MaxAttempts:    attempts,
		WebhookURL:     req.WebhookURL,
		Now:            s.cfg.Clock.Now(),
	})
	if err != nil {
		if errors.Is(err, jobstore.ErrInvalid) {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		s.storeError(w, "queueing the job", err)
		return
	}
	status := http.StatusAccepted
	if res.Existing {
		if res.Job.Upstream != req.Upstream || !bytes.Equal(res.Job.Body, compact.Bytes()) {
			writeError(w, http.StatusConflict, "idempotency key %q is already used by job %d with a different request or upstream: use a new key for a new request",
				key, res.Job.ID)
			return
		}
		status = http.StatusOK
	} else {
		s.cfg.Observer.Submitted(req.Upstream, 1)
	}
	w.Header().Set("Location", "/v1/jobs/"+formatID(res.Job.ID))
	writeJSON(w, status, s.view(res.Job, false))
}

// jobID parses the {id} path value, answering 404 when it is no job id.
func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusNotFound, "no job %q", r.PathValue("id"))
		return 0, false
	}
	return id, true
}

func (s *Service) serveGet(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := parseWait(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "wait: %v", err)
			return
		}
		wait = min(d, s.cfg.MaxLongPoll)
	}
	if _, ok := s.ownedJob(w, r, id); !ok {
		return
	}
	j, err := s.waitFinished(r.Context(), id, wait)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
		return
	case err != nil && j == nil:
		if r.Context().Err() != nil {
			return // the client left
		}
		s.storeError(w, "loading the job", err)
		return
	}
	v := s.view(j, r.URL.Query().Get("include") == "request")
	if j.WebhookURL != "" && j.State.Finished() {
		ds, err := s.store.Deliveries(r.Context(), id)
		if err != nil {
			s.storeError(w, "loading the job's webhook deliveries", err)
			return
		}
		for _, d := range ds {
			v.WebhookDeliveries = append(v.WebhookDeliveries, deliveryView(d))
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// serveRedeliver makes the job's latest webhook delivery pending and due at
// once, with the same id.
func (s *Service) serveRedeliver(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := s.ownedJob(w, r, id); !ok {
		return
	}
	d, err := s.store.Redeliver(r.Context(), jobstore.RedeliverParams{JobID: id, Now: s.cfg.Clock.Now()})
	if errors.Is(err, jobstore.ErrNotFound) {
		if _, gerr := s.store.Get(r.Context(), id); errors.Is(gerr, jobstore.ErrNotFound) {
			writeError(w, http.StatusNotFound, "no job %d", id)
			return
		}
		writeError(w, http.StatusConflict, "job %d has no webhook delivery: it has no webhook_url or has not finished", id)
		return
	}
	if err != nil {
		s.storeError(w, "redelivering the webhook", err)
		return
	}
	s.hooks.kick()
	writeJSON(w, http.StatusAccepted, deliveryView(d))
}

// parseWait accepts a Go duration ("30s", "1m") or whole seconds ("30").
func parseWait(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%q is negative", v)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration like 30s, got %q", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v)
	}
	return d, nil
}

func (s *Service) serveCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := s.ownedJob(w, r, id); !ok {
		return
	}
	j, err := s.Cancel(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
	case errors.Is(err, jobstore.ErrConflict):
		writeError(w, http.StatusConflict, "job %d already finished; it cannot be canceled", id)
	case err != nil:
		s.storeError(w, "canceling the job", err)
	default:
		writeJSON(w, http.StatusOK, s.view(j, false))
	}
}

func (s *Service) serveRetry(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := s.ownedJob(w, r, id); !ok {
		return
	}
	n, err := s.store.Requeue(r.Context(), jobstore.RequeueParams{IDs: []int64{id}, Now: s.cfg.Clock.Now()})
	if err != nil && !errors.Is(err, jobstore.ErrConflict) && !errors.Is(err, jobstore.ErrNotFound) {
		s.requeueError(w, err)
		return
	}
	j, err := s.store.Get(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
	case err != nil:
		s.storeError(w, "loading the job", err)
	case n == 0:
		writeError(w, http.StatusConflict, "job %d is %s; only dead jobs can be retried", id, j.State)
	default:
		writeJSON(w, http.StatusOK, s.view(j, false))
	}
}

// requeueError answers a failed Requeue.
func (s *Service) requeueError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, jobstore.ErrConflict):
		writeError(w, http.StatusConflict, "%v; only dead jobs can be retried", err)
	case errors.Is(err, jobstore.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	default:
		s.storeError(w, "requeueing jobs", err)
	}
}

// RetryRequest is the body of POST /v1/jobs/retry: job ids, or filters, or
// all.
type RetryRequest struct {
	IDs      []int64 `json:"ids,omitempty"`
	Upstream string  `json:"upstream,omitempty"`
	BatchID  string  `json:"batch_id,omitempty"`
	All      bool    `json:"all,omitempty"`
}

func (s *Service) serveRetryBulk(w http.ResponseWriter, r *http.Request) {
	var req RetryRequest
	if !decodeBody(w, r, 1<<20, &req, `one JSON object like {"ids":[1,2]}, {"upstream":"name"}, {"batch_id":"…"} or {"all":true}`) {
		return
	}
	if len(req.IDs) == 0 && req.Upstream == "" && req.BatchID == "" && !req.All {
		writeError(w, http.StatusBadRequest, "name ids, upstream or batch_id, or set all: true")
		return
	}
	if req.Upstream != "" {
		if _, ok := s.cfg.Protocols[req.Upstream]; !ok {
			writeError(w, http.StatusBadRequest, "unknown upstream %q", req.Upstream)
			return
		}
	}
	p := jobstore.RequeueParams{IDs: req.IDs, Upstream: req.Upstream, BatchID: req.BatchID, All: req.All, Now: s.cfg.Clock.Now()}
	if !s.admin(r) {
		// A client requeues its own jobs only, named by id or batch;
		// sweeping requeues (all, by upstream) cross clients: admins only.
		if req.All || req.Upstream != "" {
			forbidden(w, "requeueing by upstream or all")
			return
		}
		p.Client = s.cfg.ClientOf(r)
		if len(req.IDs) == 1 {
			// One id answers as GET would: 404 when it is not the caller's.
			if _, ok := s.ownedJob(w, r, req.IDs[0]); !ok {
				return
			}
		}
	}
	n, err := s.store.Requeue(r.Context(), p)
	if err != nil {
		s.requeueError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
}

// ListResponse is the body of GET /v1/jobs.
type ListResponse struct {
	Object     string    `json:"object"`
	Data       []JobView `json:"data"`
	NextCursor string    `json:"next_cursor,omitempty"`
	HasMore    bool      `json:"has_more"`
}

func (s *Service) serveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := jobstore.ListParams{Upstream: q.Get("upstream"), Client: q.Get("client"), BatchID: q.Get("batch_id")}
	if !s.admin(r) {
		if own := s.cfg.ClientOf(r); p.Client == "" || p.Client == own {
			p.Client = own
		} else {
			writeJSON(w, http.StatusOK, ListResponse{Object: "list", Data: []JobView{}}) // another client's: nothing to see
			return
		}
	}
	if v := q.Get("state"); v != "" {
		st, err := jobstore.ParseState(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "state: %v", err)
			return
		}
		p.State = st
	}
	if p.Upstream != "" {
		if _, ok := s.cfg.Protocols[p.Upstream]; !ok {
			writeError(w, http.StatusBadRequest, "unknown upstream %q", p.Upstream)
			return
		}
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "cursor: %q is not a cursor from next_cursor", v)
			return
		}
		p.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > jobstore.ListLimitMax {
			writeError(w, http.StatusBadRequest, "limit must be in [1, %d], got %q", jobstore.ListLimitMax, v)
			return
		}
		p.Limit = n
	}
	page, err := s.store.List(r.Context(), p)
	if err != nil {
		s.storeError(w, "listing jobs", err)
		return
	}
	out := ListResponse{Object: "list", Data: make([]JobView, 0, len(page.Jobs))}
	for _, j := range page.Jobs {
		out.Data = append(out.Data, s.view(j, false))
	}
	if page.Next != 0 {
		out.NextCursor, out.HasMore = formatID(page.Next), true
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) servePause(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if action != "pause" && action != "resume" {
		writeError(w, http.StatusNotFound, "no route %s %s (want pause or resume)", r.Method, r.URL.Path)
		return
	}
	if !s.admin(r) {
		forbidden(w, "pausing or resuming an upstream")
		return
	}
	if _, ok := s.cfg.Protocols[name]; !ok {
		writeError(w, http.StatusBadRequest, "unknown upstream %q (have %s)", name, strings.Join(s.upstreams, ", "))
		return
	}
	if err := s.store.SetPaused(r.Context(), jobstore.PauseParams{Upstream: name, Paused: action == "pause", Now: s.cfg.Clock.Now()}); err != nil {
		s.storeError(w, "pausing the upstream", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"upstream": name, "paused": action == "pause"})
}

func (s *Service) servePaused(w http.ResponseWriter, r *http.Request) {
	names, err := s.store.PausedUpstreams(r.Context())
	if err != nil {
		s.storeError(w, "listing paused upstreams", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"paused": append([]string{}, names...)})
}

// decodeBody reads a body of at most limit bytes into v as exactly one JSON
// value with no unknown fields and nothing after it. On failure it writes
// the error (413 or 400, naming what was wanted) and returns false.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, want string) bool {
	raw, err := readBody(w, r, limit)
	if err != nil {
		bodyError(w, err, limit)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "body must be %s: %v", want, err)
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "body must be %s, with nothing after it", want)
		return false
	}
	return true
}
