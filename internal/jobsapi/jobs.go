package jobsapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// jobID parses the {id} path value, answering 404 when it is no job id.
func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusNotFound, "no job %q", r.PathValue("id"))
		return 0, false
	}
	return id, true
}

func (a *API) serveGet(w http.ResponseWriter, r *http.Request) {
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
		wait = min(d, a.cfg.MaxLongPoll)
	}
	if _, ok := a.ownedJob(w, r, id); !ok {
		return
	}
	j, err := a.waitFinished(r.Context(), id, wait)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
		return
	case err != nil && j == nil:
		if r.Context().Err() != nil {
			return // the client left
		}
		a.storeError(w, "loading the job", err)
		return
	}
	v := NewJobView(j, r.URL.Query().Get("include") == "request")
	if j.WebhookURL != "" && j.State.Finished() {
		ds, err := a.store.Deliveries(r.Context(), id)
		if err != nil {
			a.storeError(w, "loading the job's webhook deliveries", err)
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
func (a *API) serveRedeliver(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := a.ownedJob(w, r, id); !ok {
		return
	}
	d, err := a.rt.Redeliver(r.Context(), id)
	if errors.Is(err, jobstore.ErrNotFound) {
		if _, gerr := a.store.Get(r.Context(), id); errors.Is(gerr, jobstore.ErrNotFound) {
			writeError(w, http.StatusNotFound, "no job %d", id)
			return
		}
		writeError(w, http.StatusConflict, "job %d has no webhook delivery: it has no webhook_url or has not finished", id)
		return
	}
	if err != nil {
		a.storeError(w, "redelivering the webhook", err)
		return
	}
	writeJSON(w, http.StatusAccepted, deliveryView(d))
}

func (a *API) serveCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := a.ownedJob(w, r, id); !ok {
		return
	}
	j, err := a.rt.Cancel(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
	case errors.Is(err, jobstore.ErrConflict):
		writeError(w, http.StatusConflict, "job %d already finished; it cannot be canceled", id)
	case err != nil:
		a.storeError(w, "canceling the job", err)
	default:
		a.logAdminAction(w, r, actionCancel, "job", id, "client", j.Client)
		writeJSON(w, http.StatusOK, NewJobView(j, false))
	}
}

func (a *API) serveRetry(w http.ResponseWriter, r *http.Request) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	if _, ok := a.ownedJob(w, r, id); !ok {
		return
	}
	n, err := a.store.Requeue(r.Context(), jobstore.RequeueParams{IDs: []int64{id}, Now: a.cfg.Clock.Now()})
	if err != nil && !errors.Is(err, jobstore.ErrConflict) && !errors.Is(err, jobstore.ErrNotFound) {
		a.requeueError(w, err)
		return
	}
	j, err := a.store.Get(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no job %d", id)
	case err != nil:
		a.storeError(w, "loading the job", err)
	case n == 0:
		writeError(w, http.StatusConflict, "job %d is %s; only dead jobs can be retried", id, j.State)
	default:
		a.logAdminAction(w, r, actionRetry, "job", id, "client", j.Client)
		writeJSON(w, http.StatusOK, NewJobView(j, false))
	}
}

// requeueError answers a failed Requeue.
func (a *API) requeueError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, jobstore.ErrConflict):
		writeError(w, http.StatusConflict, "%v; only dead jobs can be retried", err)
	case errors.Is(err, jobstore.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	default:
		a.storeError(w, "requeueing jobs", err)
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

func (a *API) serveRetryBulk(w http.ResponseWriter, r *http.Request) {
	var req RetryRequest
	if !decodeBody(w, r, 1<<20, &req, `one JSON object like {"ids":[1,2]}, {"upstream":"name"}, {"batch_id":"…"} or {"all":true}`) {
		return
	}
	if len(req.IDs) == 0 && req.Upstream == "" && req.BatchID == "" && !req.All {
		writeError(w, http.StatusBadRequest, "name ids, upstream or batch_id, or set all: true")
		return
	}
	if req.Upstream != "" {
		if _, ok := a.cfg.Protocols[req.Upstream]; !ok {
			writeError(w, http.StatusBadRequest, "unknown upstream %q", req.Upstream)
			return
		}
	}
	p := jobstore.RequeueParams{IDs: req.IDs, Upstream: req.Upstream, BatchID: req.BatchID, All: req.All, Now: a.cfg.Clock.Now()}
	if !a.admin(r) {
		// A client requeues its own jobs only, named by id or batch;
		// sweeping requeues (all, by upstream) cross clients: admins only.
		if req.All || req.Upstream != "" {
			forbidden(w, "requeueing by upstream or all")
			return
		}
		p.Client = a.cfg.ClientOf(r)
		if len(req.IDs) == 1 {
			// One id answers as GET would: 404 when it is not the caller's.
			if _, ok := a.ownedJob(w, r, req.IDs[0]); !ok {
				return
			}
		}
	}
	n, err := a.store.Requeue(r.Context(), p)
	if err != nil {
		a.requeueError(w, err)
		return
	}
	a.logAdminAction(w, r, actionRequeue, "ids", req.IDs, "upstream", req.Upstream, "batch_id", req.BatchID, "all", req.All, "requeued", n)
	writeJSON(w, http.StatusOK, map[string]int{"requeued": n})
}

// The orders GET /v1/jobs lists in (?order=): the newest job first (the
// default, as `sluice jobs ls` shows them), or the oldest first.
const (
	ListOrderNewest = "newest"
	ListOrderOldest = "oldest"
)

// ListResponse is the body of GET /v1/jobs: a page in the order asked for;
// next_cursor continues it in that order.
type ListResponse struct {
	Object     string    `json:"object"`
	Data       []JobView `json:"data"`
	NextCursor string    `json:"next_cursor,omitempty"`
	HasMore    bool      `json:"has_more"`
}

func (a *API) serveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := jobstore.ListParams{Upstream: q.Get("upstream"), Client: q.Get("client"), BatchID: q.Get("batch_id"), RunID: q.Get("run_id"),
		NewestFirst: true}
	switch v := q.Get("order"); v {
	case "", ListOrderNewest:
	case ListOrderOldest:
		p.NewestFirst = false
	default:
		writeError(w, http.StatusBadRequest, "order: %q is not %s or %s", v, ListOrderNewest, ListOrderOldest)
		return
	}
	if !a.admin(r) {
		if own := a.cfg.ClientOf(r); p.Client == "" || p.Client == own {
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
		if _, ok := a.cfg.Protocols[p.Upstream]; !ok {
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
	page, err := a.store.List(r.Context(), p)
	if err != nil {
		a.storeError(w, "listing jobs", err)
		return
	}
	out := ListResponse{Object: "list", Data: make([]JobView, 0, len(page.Jobs))}
	for _, j := range page.Jobs {
		out.Data = append(out.Data, NewJobView(j, false))
	}
	if page.Next != 0 {
		out.NextCursor, out.HasMore = formatID(page.Next), true
	}
	writeJSON(w, http.StatusOK, out)
}
