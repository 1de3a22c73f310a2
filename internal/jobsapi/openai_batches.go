package jobsapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

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
	b, _, ok := a.createProviderBatch(w, r, p, providerBatchID(r, p, OpenAIBatchIDPrefix), raw, lines)
	if !ok {
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
	f, err := ParseBatchFile(content, a.cfg.MaxBatchJobs)
	if err != nil {
		code := "invalid_file"
		switch {
		case strings.Contains(err.Error(), "no requests"):
			code = "empty_file"
		case strings.Contains(err.Error(), "more than"):
			code = "too_many_tasks"
		}
		return nil, []OpenAIBatchError{{Code: code, Message: err.Error()}}, nil
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

// openAIBatch renders b as OpenAI does; expiredN of its dead jobs expired.
func openAIBatch(b *jobstore.Batch, expiredN int) OpenAIBatch {
	var attrs openAIBatchAttrs
	_ = json.Unmarshal(b.Attrs, &attrs) // a Sluice batch has none: empty fields
	c := b.Counts
	created := b.CreatedAt.Unix()
	at := func(t int64) *int64 { return &t }
	v := OpenAIBatch{ID: b.ID, Object: "batch", Endpoint: cmp.Or(attrs.Endpoint, pathFor(llm.OpenAI)), InputFileID: attrs.InputFileID,
		CompletionWindow: cmp.Or(attrs.CompletionWindow, "24h"), CreatedAt: created, ExpiresAt: b.CreatedAt.Add(BatchWindow).Unix(),
		RequestCounts: OpenAICounts{Total: b.Total, Completed: c.Succeeded, Failed: c.Dead}, Metadata: attrs.Metadata}
	if len(attrs.Errors) > 0 {
		v.Status, v.FailedAt = "failed", at(created)
		v.Errors = &llm.OpenAIBatchErrors{Object: "list", Data: attrs.Errors}
		return v
	}
	v.InProgressAt = at(created)
	cancel := b.CancelRequestedAt
	if !cancel.IsZero() {
		v.CancellingAt = at(cancel.Unix())
	}
	if !b.Ended() {
		v.Status = "in_progress"
		if !cancel.IsZero() {
			v.Status = "cancelling"
		}
		return v
	}
	ended := b.EndedAt.Unix()
	v.FinalizingAt = at(ended)
	switch {
	case !cancel.IsZero():
		v.Status, v.CancelledAt = "cancelled", at(ended)
	case expiredN > 0:
		v.Status, v.ExpiredAt = "expired", at(ended)
	default:
		v.Status, v.CompletedAt = "completed", at(ended)
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

func (a *API) writeOpenAIBatch(w http.ResponseWriter, r *http.Request, p providerReq, b *jobstore.Batch) {
	n, err := a.expiredIn(r, b)
	if err != nil {
		a.storeFail(w, p, "counting the batch", err)
		return
	}
	writeJSON(w, http.StatusOK, openAIBatch(b, n))
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
	if _, err := a.rt.CancelBatch(r.Context(), b.ID); err != nil {
		a.storeFail(w, p, "canceling the batch", err)
		return
	}
	if b, ok = a.ownBatch(w, r, p, b.ID); ok {
		a.writeOpenAIBatch(w, r, p, b)
	}
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
		n, err := a.expiredIn(r, b)
		if err != nil {
			a.storeFail(w, p, "counting the batch", err)
			return
		}
		out.Data = append(out.Data, openAIBatch(b, n))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
