package jobsapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
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

// Message Batches validate a create in two steps, as Anthropic does: the
// shape of the body (a JSON object whose requests list holds 1 to
// MaxBatchJobs objects, each with a custom_id matching customIDPattern,
// unique in the batch, and an object as its params) and its size
// (MaxBatchBytes) at the create, which refuses the whole batch (400, or
// 413 for the size) and queues nothing; then each request's params,
// "asynchronously": a request whose params would be refused is answered
// as an errored result of the batch (invalid_request_error, with the
// error the gateway's request builder gives), counted in
// request_counts.errored, never sent and never charged.

// messageBatchRequest is one request of a create, as read: line is its
// index in requests.
type messageBatchRequest struct {
	CustomID *string         `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

// errBatchBody is a create whose body is not the JSON object Anthropic
// takes: its errors are worded as Anthropic's.
var errBatchBody = errors.New("invalid request body")

// parseMessageBatch reads a create's body as it arrives (a batchBody lets
// go of its chunks as they are read) and returns its requests, each
// params compacted, or the first error naming the request's index.
func parseMessageBatch(r io.Reader, maxJobs int) ([]BatchLine, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var lines []BatchLine
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBatchBody, err)
		}
		if key, _ := tok.(string); key != "requests" || found {
			if key == "requests" {
				return nil, errors.New("requests: given more than once")
			}
			var skip anyValue
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("%w: %w", errBatchBody, err)
			}
			continue
		}
		found = true
		if lines, err = parseRequests(dec, maxJobs); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the JSON object", errBatchBody)
	}
	if !found {
		return nil, errors.New("requests: Field required")
	}
	return lines, nil
}

// expectDelim reads the next token, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: %w", errBatchBody, err)
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("%w: want %q, got %v", errBatchBody, d, tok)
	}
	return nil
}

// parseRequests reads the requests list; past maxJobs its requests are
// only counted, for the error.
func parseRequests(dec *json.Decoder, maxJobs int) ([]BatchLine, error) {
	if tok, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %w", errBatchBody, err)
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, errors.New("requests: Input should be a valid list")
	}
	var lines []BatchLine
	seen := map[string]int{}
	n := 0
	for ; dec.More(); n++ {
		if n >= maxJobs {
			var skip anyValue
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("%w: %w", errBatchBody, err)
			}
			continue
		}
		var rq messageBatchRequest
		if err := dec.Decode(&rq); err != nil {
			if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
				want := "string"
				if te.Field == "" {
					want = "dictionary" // the request itself
				}
				return nil, fmt.Errorf("requests.%d%s: Input should be a valid %s", n, fieldSuffix(te.Field), want)
			}
			return nil, fmt.Errorf("%w: %w", errBatchBody, err)
		}
		l, err := checkRequest(n, rq, seen)
		if err != nil {
			return nil, err
		}
		lines = append(lines, l)
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return nil, fmt.Errorf("%w: %w", errBatchBody, err)
	}
	switch {
	case n == 0:
		return nil, errors.New("requests: List should have at least 1 item after validation, not 0")
	case n > maxJobs:
		return nil, fmt.Errorf("requests: List should have at most %d items after validation, not %d", maxJobs, n)
	}
	return lines, nil
}

// fieldSuffix is ".field" for a decode error's field, "" for the request
// itself.
func fieldSuffix(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}

// checkRequest checks request i's shape (its params are checked later,
// one by one: checkMessageBatch) and returns it as a line.
func checkRequest(i int, rq messageBatchRequest, seen map[string]int) (BatchLine, error) {
	switch {
	case rq.CustomID == nil:
		return BatchLine{}, fmt.Errorf("requests.%d.custom_id: Field required", i)
	case !customIDPattern.MatchString(*rq.CustomID):
		return BatchLine{}, fmt.Errorf("requests.%d.custom_id: String should match pattern '%s' (got %q)", i, customIDPattern, *rq.CustomID)
	}
	if first, dup := seen[*rq.CustomID]; dup {
		return BatchLine{}, fmt.Errorf("requests.%d.custom_id: %q is already used by requests.%d; custom_id must be unique within a batch", i, *rq.CustomID, first)
	}
	seen[*rq.CustomID] = i
	params := bytes.TrimSpace(rq.Params)
	if len(params) == 0 || bytes.Equal(params, []byte("null")) {
		return BatchLine{}, fmt.Errorf("requests.%d.params: Field required", i)
	}
	if params[0] != '{' {
		return BatchLine{}, fmt.Errorf("requests.%d.params: Input should be a valid dictionary", i)
	}
	body := params
	var compact bytes.Buffer
	if err := json.Compact(&compact, params); err == nil && compact.Len() != len(params) {
		body = compact.Bytes()
	}
	return BatchLine{Line: i, CustomID: *rq.CustomID, Body: body, Path: pathFor(llm.Anthropic)}, nil
}

// checkMessageBatch checks each line's params as the gateway would send
// them: a line the request builder refuses (or that asks to stream) gets
// its refusal, to be answered as its errored result; the others' models
// are returned, for the client's allowed models.
func checkMessageBatch(lines []BatchLine, now time.Time) []lineModel {
	models := make([]lineModel, 0, len(lines))
	for i := range lines {
		l := &lines[i]
		var probe struct {
			Stream *bool `json:"stream"`
		}
		if json.Unmarshal(l.Body, &probe) == nil && probe.Stream != nil && *probe.Stream {
			l.refused = &provider.RequestError{Status: http.StatusBadRequest, Type: "invalid_request_error",
				Message: "stream: Message Batches do not support streaming"}
			continue
		}
		model, err := checkBody(llm.Anthropic, l.Path, l.Body, now)
		if re, ok := errors.AsType[*provider.RequestError](err); ok {
			l.refused = re
			continue
		}
		models = append(models, lineModel{line: l.Line, model: model})
	}
	return models
}

func (a *API) serveMessageBatchCreate(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	body, err := readBatchBody(w, r, a.cfg.MaxBatchBytes)
	if errors.Is(err, errTooLarge) {
		frontdoor.WriteProblem(w, p.proto, p.reqID, frontdoor.Problem{Status: http.StatusRequestEntityTooLarge,
			Type: "request_too_large", Message: "Request exceeds the maximum allowed number of bytes."})
		return
	}
	if err != nil {
		p.bodyFail(w, err)
		return
	}
	lines, err := parseMessageBatch(body, a.cfg.MaxBatchJobs)
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	models := checkMessageBatch(lines, a.cfg.Clock.Now())
	if err := a.permitLines(r, p.upstream, "requests.%d", models); err != nil {
		p.fail(w, http.StatusForbidden, "%v", err)
		return
	}
	b, _, ok := a.createProviderBatch(w, r, p, providerBatchID(r, p, MessageBatchIDPrefix), nil, lines)
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
