package jobsapi

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// UpstreamHeader may name a batch's upstream instead of ?upstream=.
const UpstreamHeader = "X-Sluice-Upstream"

// BatchView is a batch as the API shows it, in the shape of an Anthropic
// MessageBatch plus Sluice's own per-state counts.
type BatchView struct {
	ID               string        `json:"id"`
	Type             string        `json:"type"`
	Format           string        `json:"format"`
	ProcessingStatus string        `json:"processing_status"`
	RequestCounts    RequestCounts `json:"request_counts"`
	Counts           StateCounts   `json:"counts"`
	Total            int           `json:"total"`
	CreatedAt        time.Time     `json:"created_at"`
	ResultsURL       string        `json:"results_url,omitempty"`
	// WebhookURL is the batch's completion webhook (WebhookHeader).
	WebhookURL string `json:"webhook_url,omitempty"`
	// WebhookDeliveries are its completion webhooks (GET
	// /v1/batches/{id} only).
	WebhookDeliveries []DeliveryView `json:"webhook_deliveries,omitempty"`
	// Skipped lists lines left out by ?skip_invalid=true (create only).
	Skipped []LineError `json:"skipped,omitempty"`
}

// RequestCounts are Anthropic's per-result counts.
type RequestCounts = llm.MessageBatchCounts

// StateCounts count a batch's jobs per state.
type StateCounts struct {
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Dead      int `json:"dead"`
	Canceled  int `json:"canceled"`
}

// batchQuery is what POST /v1/batches reads before its body: the upstream
// (?upstream= or the X-Sluice-Upstream header) and the options every job
// of the batch gets.
type batchQuery struct {
	upstream string
	proto    llm.Protocol
	webhook  string // the batch's completion webhook (WebhookHeader)
	skip     bool   // ?skip_invalid=true: queue the valid lines
	prio     llm.Priority
	deadline time.Time
	attempts int
}

func (a *API) serveBatchCreate(w http.ResponseWriter, r *http.Request) {
	q, ok := a.parseBatchQuery(w, r)
	if !ok {
		return
	}
	f, err := a.readBatch(w, r)
	if err != nil {
		bodyError(w, err, a.cfg.MaxBatchBytes)
		return
	}
	if f.Format != "" && f.Format != q.proto {
		writeError(w, http.StatusBadRequest, "the file has the %s batch shape but upstream %q speaks %s", f.Format, q.upstream, q.proto)
		return
	}
	params, invalid, models := a.batchJobs(r, q, f)
	if err := a.permitLines(r, q.upstream, "line %d", models); err != nil {
		writePermissionError(w, err)
		return
	}
	if len(invalid) > 0 && !q.skip {
		writeAPIError(w, http.StatusBadRequest, ErrorDetail{
			Message: fmt.Sprintf("%d invalid line(s), first on line %d: %s; nothing was queued (add ?skip_invalid=true to queue the valid lines)", len(invalid), invalid[0].Line, invalid[0].Message),
			Lines:   invalid,
		})
		return
	}
	if len(params.Jobs) == 0 {
		writeAPIError(w, http.StatusBadRequest, ErrorDetail{Message: "no valid line to queue", Lines: invalid})
		return
	}
	b, err := a.store.CreateBatch(r.Context(), params)
	if err != nil {
		if errors.Is(err, jobstore.ErrInvalid) {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		a.storeError(w, "queueing the batch", err)
		return
	}
	a.cfg.Observer.Submitted(q.upstream, len(params.Jobs))
	v := batchView(b)
	v.Skipped = invalid
	w.Header().Set("Location", "/v1/batches/"+b.ID)
	writeJSON(w, http.StatusOK, v)
}

// readBatch reads the batch file (readBatchBody: refused as soon as it is
// over MaxBatchBytes, nothing past the cap read) and parses it, letting go
// of the file's bytes as its lines are parsed. The error is errTooLarge
// for a body over the cap, the reader's own for another read failure (the
// gateway's request-bytes limit answers 503 through it), else the file's.
func (a *API) readBatch(w http.ResponseWriter, r *http.Request) (*BatchFile, error) {
	body, err := readBatchBody(w, r, a.cfg.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	return ParseBatch(body, a.cfg.MaxBatchJobs)
}

// parseBatchQuery reads r's batchQuery, or answers 400 naming what is
// wrong and reports false.
func (a *API) parseBatchQuery(w http.ResponseWriter, r *http.Request) (batchQuery, bool) {
	q := r.URL.Query()
	b := batchQuery{upstream: cmp.Or(q.Get("upstream"), r.Header.Get(UpstreamHeader))}
	if b.upstream == "" {
		writeError(w, http.StatusBadRequest, "name the upstream with ?upstream= or the %s header (have %s)", UpstreamHeader, strings.Join(a.upstreams, ", "))
		return b, false
	}
	proto, ok := a.cfg.Protocols[b.upstream]
	if !ok {
		writeError(w, http.StatusBadRequest, "unknown upstream %q (have %s)", b.upstream, strings.Join(a.upstreams, ", "))
		return b, false
	}
	b.proto = proto
	if err := a.permit(r, b.upstream, ""); err != nil {
		writePermissionError(w, err)
		return b, false
	}
	if v := q.Get("skip_invalid"); v != "" {
		skip, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "skip_invalid must be true or false, got %q", v)
			return b, false
		}
		b.skip = skip
	}
	maxAttempts := 0
	if v := q.Get("max_attempts"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "max_attempts must be a number, got %q", v)
			return b, false
		}
		maxAttempts = n
	}
	var err error
	b.prio, b.deadline, b.attempts, err = a.parseJobOptions(r, q.Get("priority"), q.Get("deadline"), maxAttempts, "")
	if err == nil {
		b.webhook, err = a.batchWebhook(r, "")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return b, false
	}
	return b, true
}

// batchJobs turns f's valid lines into the jobs to queue for q, checking
// each body as a submit's (checkBody), and returns them with the invalid
// lines (the file's and those the check refused) in line order, and the
// model each valid line asks for.
func (a *API) batchJobs(r *http.Request, q batchQuery, f *BatchFile) (jobstore.CreateBatchParams, []LineError, []lineModel) {
	now := a.cfg.Clock.Now()
	params := jobstore.CreateBatchParams{Format: q.proto, Client: a.cfg.ClientOf(r), WebhookURL: q.webhook, Now: now}
	invalid := f.Invalid
	models := make([]lineModel, 0, len(f.Lines))
	for _, l := range f.Lines {
		path := cmp.Or(l.Path, pathFor(q.proto))
		model, err := checkBody(q.proto, path, l.Body, now)
		if err != nil {
			invalid = append(invalid, LineError{Line: l.Line, CustomID: l.CustomID, Message: err.Error()})
			continue
		}
		models = append(models, lineModel{line: l.Line, model: model})
		params.Jobs = append(params.Jobs, jobstore.InsertParams{
			Upstream: q.upstream, Priority: q.prio, Client: a.cfg.ClientOf(r), Path: path,
			Body: l.Body, Deadline: q.deadline, MaxAttempts: q.attempts, CustomID: l.CustomID, Now: now,
		})
	}
	sortLineErrors(invalid)
	return params, invalid, models
}

func sortLineErrors(es []LineError) {
	for i := 1; i < len(es); i++ {
		for k := i; k > 0 && es[k].Line < es[k-1].Line; k-- {
			es[k], es[k-1] = es[k-1], es[k]
		}
	}
}

func batchView(b *jobstore.Batch) BatchView {
	c := b.Counts
	v := BatchView{
		ID: b.ID, Type: "message_batch", Format: string(b.Format), Total: b.Total, CreatedAt: b.CreatedAt,
		Counts:           StateCounts{Queued: c.Queued, Running: c.Running, Succeeded: c.Succeeded, Dead: c.Dead, Canceled: c.Canceled},
		RequestCounts:    RequestCounts{Processing: c.Queued + c.Running, Succeeded: c.Succeeded, Errored: c.Dead, Canceled: c.Canceled},
		ProcessingStatus: "in_progress", WebhookURL: b.WebhookURL,
	}
	if b.Ended() {
		v.ProcessingStatus = "ended"
		v.ResultsURL = "/v1/batches/" + b.ID + "/results"
	}
	return v
}

func (a *API) getBatch(w http.ResponseWriter, r *http.Request) (*jobstore.Batch, bool) {
	id := r.PathValue("id")
	b, err := a.store.GetBatch(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound) || (err == nil && !a.owns(r, b.Client)):
		writeError(w, http.StatusNotFound, "no batch %q", id)
		return nil, false
	case err != nil:
		a.storeError(w, "loading the batch", err)
		return nil, false
	}
	return b, true
}

func (a *API) serveBatchGet(w http.ResponseWriter, r *http.Request) {
	b, ok := a.getBatch(w, r)
	if !ok {
		return
	}
	v := batchView(b)
	if b.Ended() && b.Counts.Dead > 0 {
		// Split dead jobs into errored and expired, as the provider does.
		expiredN := 0
		err := a.eachBatchJob(r, b.ID, func(j *jobstore.Job) error {
			if expired(j) {
				expiredN++
			}
			return nil
		})
		if err != nil {
			a.storeError(w, "counting the batch", err)
			return
		}
		v.RequestCounts.Errored -= expiredN
		v.RequestCounts.Expired = expiredN
	}
	if b.WebhookURL != "" {
		ds, err := a.store.BatchDeliveries(r.Context(), b.ID)
		if err != nil {
			a.storeError(w, "loading the batch's webhook deliveries", err)
			return
		}
		for _, d := range ds {
			v.WebhookDeliveries = append(v.WebhookDeliveries, deliveryView(d))
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// eachBatchJob calls fn for every job of a batch in custom_id order.
func (a *API) eachBatchJob(r *http.Request, id string, fn func(*jobstore.Job) error) error {
	after := ""
	for {
		page, err := a.store.BatchJobs(r.Context(), jobstore.BatchJobsParams{BatchID: id, After: after, Limit: jobstore.ListLimitMax})
		if err != nil {
			return fmt.Errorf("listing batch jobs: %w", err)
		}
		for _, j := range page.Jobs {
			if err := fn(j); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

// serveBatchResults streams one JSONL line per finished job; jobs still
// queued or running are left out until they finish.
func (a *API) serveBatchResults(w http.ResponseWriter, r *http.Request) {
	b, ok := a.getBatch(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	if !b.Ended() {
		w.Header().Set("X-Sluice-Partial", "true")
	}
	bw := bufio.NewWriter(w)
	err := a.eachBatchJob(r, b.ID, func(j *jobstore.Job) error {
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

func (a *API) serveBatchCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := a.getBatch(w, r); !ok {
		return
	}
	res, err := a.rt.CancelBatch(r.Context(), id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		writeError(w, http.StatusNotFound, "no batch %q", id)
		return
	case err != nil:
		a.storeError(w, "canceling the batch", err)
		return
	}
	a.logAdminAction(w, r, actionCancelBatch, "batch_id", id, "canceled", res.Canceled)
	b, ok := a.getBatch(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, batchView(b))
}

// BatchList is the body of GET /v1/batches: the newest batches first, in
// the shape of Anthropic's list of message batches.
type BatchList struct {
	Data    []BatchView `json:"data"`
	HasMore bool        `json:"has_more"`
	FirstID string      `json:"first_id,omitempty"`
	LastID  string      `json:"last_id,omitempty"`
}

// serveBatchList answers GET /v1/batches?limit=&client=: the caller's own
// batches, newest first (an admin sees every client's, or one client's
// with ?client=). The counts are by state; a dead job counts as errored
// (GET /v1/batches/{id} tells expired apart).
func (a *API) serveBatchList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := jobstore.ListBatchesParams{Client: q.Get("client")}
	if !a.admin(r) {
		if own := a.cfg.ClientOf(r); p.Client == "" || p.Client == own {
			p.Client = own
		} else {
			writeJSON(w, http.StatusOK, BatchList{Data: []BatchView{}}) // another client's: nothing to see
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n >= jobstore.ListLimitMax {
			writeError(w, http.StatusBadRequest, "limit: want 1 to %d, got %q", jobstore.ListLimitMax-1, v)
			return
		}
		p.Limit = n
	}
	want := cmp.Or(p.Limit, jobstore.ListLimitDefault)
	p.Limit = want + 1 // one more tells whether there are more
	bs, err := a.store.ListBatches(r.Context(), p)
	if err != nil {
		a.storeError(w, "listing batches", err)
		return
	}
	out := BatchList{Data: []BatchView{}, HasMore: len(bs) > want}
	for _, b := range bs[:min(len(bs), want)] {
		out.Data = append(out.Data, batchView(b))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = out.Data[0].ID, out.Data[n-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}
