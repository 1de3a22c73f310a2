package jobsapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// Anthropic's Message Batches API (POST/GET /v1/messages/batches, GET,
// DELETE …/{id}, POST …/{id}/cancel, GET …/{id}/results) over Sluice
// batches (provider.go).

// MessageBatchIDPrefix starts the id of a batch made by Anthropic's API.
const MessageBatchIDPrefix = "msgbatch_"

// customIDPattern is Anthropic's rule for a request's custom_id.
var customIDPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func (a *API) anthropicRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages/batches", a.serveMessageBatchCreate)
	mux.HandleFunc("GET /v1/messages/batches", a.serveMessageBatchList)
	mux.HandleFunc("GET /v1/messages/batches/{id}", a.serveMessageBatchGet)
	mux.HandleFunc("DELETE /v1/messages/batches/{id}", a.serveMessageBatchDelete)
	mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", a.serveMessageBatchCancel)
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", a.serveMessageBatchResults)
	return mux
}

// MessageBatch is Anthropic's message_batch object.
type MessageBatch = llm.MessageBatch

// messageBatchCreate is the body of POST /v1/messages/batches.
type messageBatchCreate struct {
	Requests []struct {
		CustomID *string         `json:"custom_id"`
		Params   json.RawMessage `json:"params"`
	} `json:"requests"`
}

// parseMessageBatch checks a create's body as Anthropic does and returns
// its requests, or the first error naming the request's index.
func (a *API) parseMessageBatch(body []byte) ([]BatchLine, error) {
	var req messageBatchCreate
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("the body must be a JSON object {\"requests\": [...]}: %w", err)
	}
	switch {
	case len(req.Requests) == 0:
		return nil, errors.New("requests: at least one request is required")
	case len(req.Requests) > a.cfg.MaxBatchJobs:
		return nil, fmt.Errorf("requests: at most %d requests in a batch, got %d", a.cfg.MaxBatchJobs, len(req.Requests))
	}
	seen := make(map[string]int, len(req.Requests))
	lines := make([]BatchLine, 0, len(req.Requests))
	for i, rq := range req.Requests {
		switch {
		case rq.CustomID == nil:
			return nil, fmt.Errorf("requests.%d.custom_id: Field required", i)
		case !customIDPattern.MatchString(*rq.CustomID):
			return nil, fmt.Errorf("requests.%d.custom_id: %q must be 1 to 64 letters, digits, '_' or '-'", i, *rq.CustomID)
		}
		if first, dup := seen[*rq.CustomID]; dup {
			return nil, fmt.Errorf("requests.%d.custom_id: %q is already used by requests.%d; custom_id must be unique within a batch", i, *rq.CustomID, first)
		}
		seen[*rq.CustomID] = i
		params := bytes.TrimSpace(rq.Params)
		if len(params) == 0 || params[0] != '{' {
			return nil, fmt.Errorf("requests.%d.params: Field required (the Messages request)", i)
		}
		var probe struct {
			Stream *bool `json:"stream"`
		}
		if err := json.Unmarshal(params, &probe); err == nil && probe.Stream != nil && *probe.Stream {
			return nil, fmt.Errorf("requests.%d.params.stream: batch requests cannot stream", i)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, params); err != nil {
			return nil, fmt.Errorf("requests.%d.params: %w", i, err)
		}
		lines = append(lines, BatchLine{Line: i, CustomID: *rq.CustomID, Body: compact.Bytes()})
	}
	return lines, nil
}

func (a *API) serveMessageBatchCreate(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	body, err := readBody(w, r, a.cfg.MaxBatchBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			p.fail(w, http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", a.cfg.MaxBatchBytes)
			return
		}
		bodyError(w, err, a.cfg.MaxBatchBytes)
		return
	}
	lines, err := a.parseMessageBatch(body)
	if err == nil {
		now := a.cfg.Clock.Now()
		for _, l := range lines {
			if cerr := checkBody(p.proto, pathFor(p.proto), l.Body, now); cerr != nil {
				err = fmt.Errorf("requests.%d.params: %w", l.Line, cerr)
				break
			}
		}
	}
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	b, ok := a.createProviderBatch(w, r, p, providerBatchID(r, p, MessageBatchIDPrefix), nil, lines)
	if !ok {
		return
	}
	a.writeMessageBatch(w, r, p, b)
}

// messageBatch renders b as Anthropic does; expiredN of its dead jobs
// expired.
func messageBatch(r *http.Request, p providerReq, b *jobstore.Batch, expiredN int) MessageBatch {
	c := b.Counts
	v := MessageBatch{ID: b.ID, Type: "message_batch", ProcessingStatus: "in_progress", CreatedAt: b.CreatedAt,
		ExpiresAt: b.CreatedAt.Add(BatchWindow),
		RequestCounts: RequestCounts{Processing: c.Queued + c.Running, Succeeded: c.Succeeded, Errored: c.Dead - expiredN,
			Canceled: c.Canceled, Expired: expiredN}}
	if t := b.CancelRequestedAt; !t.IsZero() {
		v.CancelInitiatedAt = &t
		v.ProcessingStatus = "canceling"
	}
	if b.Ended() {
		t := b.EndedAt
		v.EndedAt = &t
		v.ProcessingStatus = "ended"
		u := baseURL(r, p.upstream) + "/v1/messages/batches/" + b.ID + "/results"
		v.ResultsURL = &u
	}
	return v
}

func (a *API) writeMessageBatch(w http.ResponseWriter, r *http.Request, p providerReq, b *jobstore.Batch) {
	n, err := a.expiredIn(r, b)
	if err != nil {
		a.storeFail(w, p, "counting the batch", err)
		return
	}
	writeJSON(w, http.StatusOK, messageBatch(r, p, b, n))
}

func (a *API) serveMessageBatchGet(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	if b, ok := a.ownBatch(w, r, p, r.PathValue("id")); ok {
		a.writeMessageBatch(w, r, p, b)
	}
}

func (a *API) serveMessageBatchCancel(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	b, ok := a.ownBatch(w, r, p, r.PathValue("id"))
	if !ok {
		return
	}
	if _, err := a.rt.CancelBatch(r.Context(), b.ID); err != nil {
		a.storeFail(w, p, "canceling the batch", err)
		return
	}
	if b, ok = a.ownBatch(w, r, p, b.ID); ok {
		a.writeMessageBatch(w, r, p, b)
	}
}

func (a *API) serveMessageBatchDelete(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	b, ok := a.ownBatch(w, r, p, r.PathValue("id"))
	if !ok {
		return
	}
	err := a.store.DeleteBatch(r.Context(), b.ID)
	switch {
	case errors.Is(err, jobstore.ErrConflict):
		p.fail(w, http.StatusBadRequest, "message batch %s is still in progress: it can be deleted once it has ended (cancel it first)", b.ID)
		return
	case errors.Is(err, jobstore.ErrNotFound):
		p.fail(w, http.StatusNotFound, "no batch %q", b.ID)
		return
	case err != nil:
		a.storeFail(w, p, "deleting the batch", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": b.ID, "type": "message_batch_deleted"})
}

// serveMessageBatchResults streams one JSONL line per request once the
// batch has ended, in custom_id order.
func (a *API) serveMessageBatchResults(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	b, ok := a.ownBatch(w, r, p, r.PathValue("id"))
	if !ok {
		return
	}
	if !b.Ended() {
		p.fail(w, http.StatusNotFound, "message batch %s has not ended yet: its results are available once processing_status is ended", b.ID)
		return
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	a.writeResults(w, r, b, func(*jobstore.Job) bool { return true })
}

// writeResults writes the result line of every finished job of b that
// keep accepts, in the batch's format.
func (a *API) writeResults(w http.ResponseWriter, r *http.Request, b *jobstore.Batch, keep func(*jobstore.Job) bool) {
	bw := bufio.NewWriter(w)
	err := a.eachBatchJob(r, b.ID, func(j *jobstore.Job) error {
		if !keep(j) {
			return nil
		}
		line, ok := ResultLine(b.Format, NewJobView(j, false))
		if !ok {
			return nil
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
		return bw.WriteByte('\n')
	})
	if err != nil {
		a.cfg.Logger.Warn("writing batch results", "batch", b.ID, "err", err)
	}
	_ = bw.Flush()
}

// MessageBatchList is the body of GET /v1/messages/batches.
type MessageBatchList = llm.MessageBatchList

// serveMessageBatchList answers the caller's batches on this upstream,
// newest first, paged with before_id, after_id and limit (1 to 1000,
// default 20).
func (a *API) serveMessageBatchList(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > jobstore.ListLimitMax-1 {
			p.fail(w, http.StatusBadRequest, "limit: want 1 to %d, got %q", jobstore.ListLimitMax-1, v)
			return
		}
		limit = n
	}
	lp := jobstore.ListBatchesParams{Client: p.client, Upstream: p.upstream, After: q.Get("after_id"), Before: q.Get("before_id"), Limit: limit + 1}
	if lp.After != "" && lp.Before != "" {
		p.fail(w, http.StatusBadRequest, "before_id and after_id cannot both be set")
		return
	}
	bs, err := a.store.ListBatches(r.Context(), lp)
	if err != nil {
		a.storeFail(w, p, "listing batches", err)
		return
	}
	out := MessageBatchList{Data: []MessageBatch{}, HasMore: len(bs) > limit}
	if out.HasMore {
		if lp.Before != "" {
			bs = bs[1:] // read from the cursor up: the extra is the newest
		} else {
			bs = bs[:limit]
		}
	}
	for _, b := range bs {
		n, err := a.expiredIn(r, b)
		if err != nil {
			a.storeFail(w, p, "counting the batch", err)
			return
		}
		out.Data = append(out.Data, messageBatch(r, p, b, n))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
