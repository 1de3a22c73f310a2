package jobsapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// OpenAI's Batch API (POST/GET /v1/batches, GET …/{id}, POST …/{id}/cancel)
// over Sluice batches (provider.go), with its input, output and error
// files in the Files API (openai_files.go).

// OpenAIBatchIDPrefix starts the id of a batch made by OpenAI's API.
const OpenAIBatchIDPrefix = "batch_"

// openAIEndpoints are the batch endpoints Sluice schedules: the paths its
// OpenAI upstreams meter (chat completions, Responses, embeddings). OpenAI's
// others (/v1/completions, /v1/moderations) are refused with a clear error
// rather than queued unmetered.
var openAIEndpoints = frontdoor.ScheduledPaths(llm.OpenAI)

func (a *API) openaiRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/batches", a.serveOpenAIBatchCreate)
	mux.HandleFunc("GET /v1/batches", a.serveOpenAIBatchList)
	mux.HandleFunc("GET /v1/batches/{id}", a.serveOpenAIBatchGet)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", a.serveOpenAIBatchCancel)
	mux.HandleFunc("POST /v1/files", a.serveFileCreate)
	mux.HandleFunc("GET /v1/files", a.serveFileList)
	mux.HandleFunc("GET /v1/files/{id}", a.serveFileGet)
	mux.HandleFunc("GET /v1/files/{id}/content", a.serveFileContent)
	mux.HandleFunc("DELETE /v1/files/{id}", a.serveFileDelete)
	return mux
}

// openAIBatchAttrs are the fields of an OpenAI batch kept in its attrs.
type openAIBatchAttrs struct {
	Endpoint         string            `json:"endpoint"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	// Errors are the input file's errors of a batch that failed
	// validation (and so has no job).
	Errors []OpenAIBatchError `json:"errors,omitempty"`
}

// OpenAIBatchError is one error of a batch's input file.
type OpenAIBatchError = llm.OpenAIBatchError

// OpenAIBatch is OpenAI's batch object.
type OpenAIBatch = llm.OpenAIBatch

// OpenAICounts are OpenAI's request counts.
type OpenAICounts = llm.OpenAIBatchCounts

// openAIBatchCreate is the body of POST /v1/batches.
type openAIBatchCreate struct {
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
}

func (a *API) serveOpenAIBatchCreate(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	var req openAIBatchCreate
	body, err := readBody(w, r, a.cfg.MaxBodyBytes)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	switch {
	case err != nil:
		p.fail(w, http.StatusBadRequest, "the body must be a JSON object with input_file_id, endpoint and completion_window: %v", err)
		return
	case req.InputFileID == "":
		p.fail(w, http.StatusBadRequest, "input_file_id is required")
		return
	case req.CompletionWindow != "24h":
		p.fail(w, http.StatusBadRequest, "completion_window must be \"24h\", got %q", req.CompletionWindow)
		return
	case !slices.Contains(openAIEndpoints, req.Endpoint):
		p.fail(w, http.StatusBadRequest, "endpoint %q is not scheduled by this gateway: batches may use %s", req.Endpoint, strings.Join(openAIEndpoints, ", "))
		return
	case len(req.Metadata) > 16:
		p.fail(w, http.StatusBadRequest, "metadata: at most 16 pairs, got %d", len(req.Metadata))
		return
	}
	f, ok := a.ownFile(w, r, p, req.InputFileID, true)
	if !ok {
		return
	}
	if f.Purpose != "batch" {
		p.fail(w, http.StatusBadRequest, "file %s has purpose %q: a batch's input file must have purpose \"batch\"", f.ID, f.Purpose)
		return
	}
	attrs := openAIBatchAttrs{Endpoint: req.Endpoint, InputFileID: req.InputFileID, CompletionWindow: req.CompletionWindow, Metadata: req.Metadata}
	lines, errs, models := a.parseOpenAIInput(f.Content, req.Endpoint)
	if err := a.permitLines(r, p.upstream, "line %d", models); err != nil {
		p.fail(w, http.StatusForbidden, "%v", err)
		return
	}
	if len(errs) > 0 {
		// As OpenAI: the batch is created, and fails its validation.
		attrs.Errors, lines = errs, nil
	}
	raw, err := json.Marshal(attrs)
	if err != nil {
		p.fail(w, http.StatusInternalServerError, "encoding the batch: %v", err)
		return
	}
	b, existing, ok := a.createProviderBatch(w, r, p, providerBatchID(r, p, OpenAIBatchIDPrefix), raw, lines)
	if !ok {
		return
	}
	if !existing {
		// The create's own answer is the batch as OpenAI's create answers
		// it, before its validation; every later read shows what the
		// validation (done here) made of it: in_progress or failed.
		writeJSON(w, http.StatusOK, validatingBatch(b))
		return
	}
	a.writeOpenAIBatch(w, r, p, b)
}

// parseOpenAIInput reads a batch input file: every line must be a request
// to endpoint with a unique custom_id and a body the front door accepts.
// The errors name their 1-based line; models are the models the valid
// lines ask for.
func (a *API) parseOpenAIInput(content []byte, endpoint string) ([]BatchLine, []OpenAIBatchError, []lineModel) {
	lineErr := func(code string, line int, msg string) OpenAIBatchError {
		l := line
		return OpenAIBatchError{Code: code, Message: msg, Line: &l}
	}
	limit := a.cfg.MaxOpenAIBatchJobs
	f, err := ParseBatchFile(content, limit)
	switch {
	case errors.Is(err, ErrBatchEmpty):
		return nil, []OpenAIBatchError{{Code: "empty_file", Message: "The batch input file is empty."}}, nil
	case errors.Is(err, ErrBatchTooMany):
		return nil, []OpenAIBatchError{{Code: "too_many_tasks", Message: fmt.Sprintf(
			"The batch input file has %d requests; the limit is %d.", requestLines(content), limit)}}, nil
	case err != nil:
		return nil, []OpenAIBatchError{{Code: "invalid_file", Message: err.Error()}}, nil
	}
	var errs []OpenAIBatchError
	models := make([]lineModel, 0, len(f.Lines))
	for _, e := range f.Invalid {
		errs = append(errs, lineErr("invalid_request", e.Line, e.Message))
	}
	if f.Format != "" && f.Format != llm.OpenAI {
		errs = append(errs, OpenAIBatchError{Code: "invalid_file", Message: `lines must be {"custom_id","method","url","body"}`})
	}
	now := a.cfg.Clock.Now()
	for _, l := range f.Lines {
		if l.Path != endpoint {
			errs = append(errs, lineErr("mismatched_endpoint", l.Line,
				fmt.Sprintf("the url %q does not match the batch's endpoint %q", l.Path, endpoint)))
			continue
		}
		model, err := checkBody(llm.OpenAI, l.Path, l.Body, now)
		if err != nil {
			errs = append(errs, lineErr("invalid_request", l.Line, "body: "+err.Error()))
			continue
		}
		models = append(models, lineModel{line: l.Line, model: model})
	}
	sortOpenAIErrors(errs)
	return f.Lines, errs, models
}

// requestLines counts the non-blank lines of a batch input file.
func requestLines(content []byte) int {
	n := 0
	for line := range bytes.Lines(content) {
		if len(bytes.TrimSpace(line)) > 0 {
			n++
		}
	}
	return n
}

func sortOpenAIErrors(es []OpenAIBatchError) {
	line := func(e OpenAIBatchError) int {
		if e.Line == nil {
			return 0
		}
		return *e.Line
	}
	for i := 1; i < len(es); i++ {
		for k := i; k > 0 && line(es[k]) < line(es[k-1]); k-- {
			es[k], es[k-1] = es[k-1], es[k]
		}
	}
}

// OpenAI's batch life cycle, as the gateway answers it (the statuses of
// llm.OpenAIBatch*): the create answers "validating"; the input file is
// validated in the create, so every later read shows "failed" (failed_at
// the creation, errors.data the file's errors, no job queued) or
// "in_progress" (in_progress_at the creation) while the batch's jobs run;
// once all have finished, "finalizing" (finalizing_at their last finish)
// for Config.BatchFinalizing, then "completed" (completed_at the end of
// finalizing) with its output and error files. A cancel shows
// "cancelling" (cancelling_at) until every job has finished, then
// "cancelled"; a batch whose window ran out with jobs unfinished is
// "expired" (expired_at its end). The result files are named only once
// the batch is completed, cancelled or expired.

// openAIBatchBase is b's fields that do not change over its life.
func openAIBatchBase(b *jobstore.Batch) (OpenAIBatch, openAIBatchAttrs) {
	var attrs openAIBatchAttrs
	_ = json.Unmarshal(b.Attrs, &attrs) // a Sluice batch has none: empty fields
	return OpenAIBatch{ID: b.ID, Object: "batch", Endpoint: cmp.Or(attrs.Endpoint, pathFor(llm.OpenAI)), InputFileID: attrs.InputFileID,
		CompletionWindow: cmp.Or(attrs.CompletionWindow, "24h"), CreatedAt: b.CreatedAt.Unix(), ExpiresAt: b.CreatedAt.Add(BatchWindow).Unix(),
		Metadata: attrs.Metadata}, attrs
}

// validatingBatch is b as its create answers it: validating, nothing
// counted or started yet.
func validatingBatch(b *jobstore.Batch) OpenAIBatch {
	v, _ := openAIBatchBase(b)
	v.Status = llm.OpenAIBatchValidating
	return v
}

// openAIBatch renders b as OpenAI does at now; expiredN of its dead jobs
// expired; finalizing is how long it finalizes (Config.BatchFinalizing).
func openAIBatch(b *jobstore.Batch, expiredN int, now time.Time, finalizing time.Duration) OpenAIBatch {
	v, attrs := openAIBatchBase(b)
	at := func(t time.Time) *int64 { u := t.Unix(); return &u }
	if len(attrs.Errors) > 0 {
		v.Status, v.FailedAt = llm.OpenAIBatchFailed, at(b.CreatedAt)
		v.Errors = &llm.OpenAIBatchErrors{Object: "list", Data: attrs.Errors}
		return v
	}
	c := b.Counts
	v.RequestCounts = OpenAICounts{Total: b.Total, Completed: c.Succeeded, Failed: c.Dead}
	v.InProgressAt = at(b.CreatedAt)
	cancel := b.CancelRequestedAt
	if !cancel.IsZero() {
		v.CancellingAt = at(cancel)
	}
	switch {
	case !b.Ended() && cancel.IsZero():
		v.Status = llm.OpenAIBatchInProgress
		return v
	case !b.Ended():
		v.Status = llm.OpenAIBatchCancelling
		return v
	case !cancel.IsZero():
		v.Status, v.CancelledAt = llm.OpenAIBatchCancelled, at(b.EndedAt)
	case expiredN > 0:
		v.Status, v.ExpiredAt = llm.OpenAIBatchExpired, at(b.EndedAt)
	case now.Before(b.EndedAt.Add(finalizing)):
		v.Status, v.FinalizingAt = llm.OpenAIBatchFinalizing, at(b.EndedAt)
		return v
	default:
		v.Status, v.FinalizingAt, v.CompletedAt = llm.OpenAIBatchCompleted, at(b.EndedAt), at(b.EndedAt.Add(finalizing))
	}
	if c.Succeeded > 0 {
		id := outputFileID(b.ID)
		v.OutputFileID = &id
	}
	if c.Dead+c.Canceled > 0 {
		id := errorFileID(b.ID)
		v.ErrorFileID = &id
	}
	return v
}

// renderOpenAIBatch is b as OpenAI shows it now.
func (a *API) renderOpenAIBatch(r *http.Request, b *jobstore.Batch) (OpenAIBatch, error) {
	n, err := a.expiredIn(r, b)
	if err != nil {
		return OpenAIBatch{}, err
	}
	return openAIBatch(b, n, a.cfg.Clock.Now(), a.cfg.BatchFinalizing), nil
}

func (a *API) writeOpenAIBatch(w http.ResponseWriter, r *http.Request, p providerReq, b *jobstore.Batch) {
	v, err := a.renderOpenAIBatch(r, b)
	if err != nil {
		a.storeFail(w, p, "counting the batch", err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *API) serveOpenAIBatchGet(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	if b, ok := a.ownBatch(w, r, p, r.PathValue("id")); ok {
		a.writeOpenAIBatch(w, r, p, b)
	}
}

func (a *API) serveOpenAIBatchCancel(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	b, ok := a.ownBatch(w, r, p, r.PathValue("id"))
	if !ok {
		return
	}
	v, err := a.renderOpenAIBatch(r, b)
	if err != nil {
		a.storeFail(w, p, "counting the batch", err)
		return
	}
	switch v.Status {
	case llm.OpenAIBatchCompleted, llm.OpenAIBatchFailed, llm.OpenAIBatchExpired, llm.OpenAIBatchCancelled:
		p.fail(w, http.StatusBadRequest, "Cannot cancel a batch with status '%s'.", v.Status)
		return
	}
	if _, err := a.rt.CancelBatch(r.Context(), b.ID); err != nil {
		a.storeFail(w, p, "canceling the batch", err)
		return
	}
	if b, ok = a.ownBatch(w, r, p, b.ID); !ok {
		return
	}
	if v, err = a.renderOpenAIBatch(r, b); err != nil {
		a.storeFail(w, p, "counting the batch", err)
		return
	}
	if v.Status == llm.OpenAIBatchCancelled {
		// The cancel answers "cancelling", as OpenAI's does (the calls
		// in flight are being aborted); the next read shows it cancelled.
		v.Status, v.CancelledAt, v.OutputFileID, v.ErrorFileID = llm.OpenAIBatchCancelling, nil, nil, nil
	}
	writeJSON(w, http.StatusOK, v)
}

// openAIList is OpenAI's cursor page.
type openAIList[T any] struct {
	Object  string  `json:"object"`
	Data    []T     `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// listLimit reads ?limit= (1 to 100, default 20, as OpenAI).
func listLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 20, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, fmt.Errorf("limit: want 1 to 100, got %q", v)
	}
	return n, nil
}

func (a *API) serveOpenAIBatchList(w http.ResponseWriter, r *http.Request) {
	p := a.providerReq(r)
	limit, err := listLimit(r)
	if err != nil {
		p.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	bs, err := a.store.ListBatches(r.Context(), jobstore.ListBatchesParams{Client: p.client, Upstream: p.upstream,
		After: r.URL.Query().Get("after"), Limit: limit + 1})
	if err != nil && !errors.Is(err, jobstore.ErrInvalid) {
		a.storeFail(w, p, "listing batches", err)
		return
	}
	out := openAIList[OpenAIBatch]{Object: "list", Data: []OpenAIBatch{}, HasMore: len(bs) > limit}
	for _, b := range bs[:min(len(bs), limit)] {
		v, err := a.renderOpenAIBatch(r, b)
		if err != nil {
			a.storeFail(w, p, "counting the batch", err)
			return
		}
		out.Data = append(out.Data, v)
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
