package mock

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Anthropic's Message Batches API (spec §1.7): POST/GET
// /v1/messages/batches, GET and DELETE …/{id}, POST …/{id}/cancel, GET
// …/{id}/results. The create checks the body's structure at once (400);
// each request's params are validated "asynchronously", as Anthropic does:
// an invalid one comes back as an errored result.

const messageBatchesPath = "/v1/messages/batches"

// anthropicCustomID is Anthropic's rule for a custom_id.
var anthropicCustomID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// messageBatchTier is the usage.service_tier of a batch reply.
const messageBatchTier = "batch"

type messageBatchCounts struct {
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Errored    int `json:"errored"`
	Canceled   int `json:"canceled"`
	Expired    int `json:"expired"`
}

type messageBatchObject struct {
	ID                string             `json:"id"`
	Type              string             `json:"type"`
	ProcessingStatus  string             `json:"processing_status"`
	RequestCounts     messageBatchCounts `json:"request_counts"`
	EndedAt           *string            `json:"ended_at"`
	CreatedAt         string             `json:"created_at"`
	ExpiresAt         string             `json:"expires_at"`
	ArchivedAt        *string            `json:"archived_at"`
	CancelInitiatedAt *string            `json:"cancel_initiated_at"`
	ResultsURL        *string            `json:"results_url"`
}

func rfc3339(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

func rfc3339Ptr(t time.Time) *string {
	s := rfc3339(t)
	return &s
}

// handleBatchPath serves the Batch APIs' paths; false for any other path.
func (s *Server) handleBatchPath(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == messageBatchesPath || strings.HasPrefix(p, messageBatchesPath+"/"):
		s.serveMessageBatches(w, r, strings.TrimPrefix(strings.TrimPrefix(p, messageBatchesPath), "/"))
	case p == openAIBatchesPath || strings.HasPrefix(p, openAIBatchesPath+"/"):
		s.serveOpenAIBatches(w, r, strings.TrimPrefix(strings.TrimPrefix(p, openAIBatchesPath), "/"))
	case p == filesPath || strings.HasPrefix(p, filesPath+"/"):
		s.serveFiles(w, r, strings.TrimPrefix(strings.TrimPrefix(p, filesPath), "/"))
	default:
		return false
	}
	return true
}

func (s *Server) serveMessageBatches(w http.ResponseWriter, r *http.Request, rest string) {
	x := s.exchange(w, r, protoAnthropic)
	id, action, _ := strings.Cut(rest, "/")
	method := func(m string) bool {
		if r.Method != m {
			x.fail(&apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
				message: fmt.Sprintf("Method %s not allowed for %s", r.Method, r.URL.Path)}, nil)
			return false
		}
		return true
	}
	if !x.auth() || x.refused() {
		return
	}
	switch {
	case id == "" && r.Method == http.MethodPost:
		s.createMessageBatch(x)
	case id == "" && method(http.MethodGet):
		s.listMessageBatches(x)
	case id == "":
	case action == "" && r.Method == http.MethodDelete:
		s.deleteMessageBatch(x, id)
	case action == "" && method(http.MethodGet):
		s.getMessageBatch(x, id)
	case action == "cancel" && method(http.MethodPost):
		s.cancelMessageBatch(x, id)
	case action == "results" && method(http.MethodGet):
		s.messageBatchResults(x, id)
	case action != "cancel" && action != "results":
		x.fail(&apiError{status: http.StatusNotFound, typ: "not_found_error", message: "The requested resource could not be found."}, nil)
	}
}

func (s *Server) createMessageBatch(x *exchange) {
	cfg := s.cfg.Batch
	body := x.bodyLimit(cfg.maxBytes(protoAnthropic))
	if body == nil {
		return
	}
	var req struct {
		Requests *[]map[string]json.RawMessage `json:"requests"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		x.fail(invalid("invalid request body: %v", err), nil)
		return
	}
	switch {
	case req.Requests == nil:
		x.fail(invalid("requests: Field required"), nil)
		return
	case len(*req.Requests) == 0:
		x.fail(invalid("requests: List should have at least 1 item after validation, not 0"), nil)
		return
	case len(*req.Requests) > cfg.maxRequests(protoAnthropic):
		x.fail(invalid("requests: List should have at most %d items after validation, not %d",
			cfg.maxRequests(protoAnthropic), len(*req.Requests)), nil)
		return
	}
	seen := map[string]int{}
	lines := make([]batchLine, len(*req.Requests))
	for i, rq := range *req.Requests {
		var id string
		if rq == nil || !present(rq["custom_id"]) {
			x.fail(invalid("requests.%d.custom_id: Field required", i), nil)
			return
		}
		if json.Unmarshal(rq["custom_id"], &id) != nil || !anthropicCustomID.MatchString(id) {
			x.fail(invalid("requests.%d.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i), nil)
			return
		}
		if first, dup := seen[id]; dup {
			x.fail(invalid("requests.%d.custom_id: Duplicate custom_id %q (also requests.%d): custom_id must be unique within a batch", i, id, first), nil)
			return
		}
		seen[id] = i
		if !present(rq["params"]) || rq["params"][0] != '{' {
			x.fail(invalid("requests.%d.params: Input should be a valid dictionary", i), nil)
			return
		}
		lines[i] = s.anthropicBatchLine(id, rq["params"])
	}
	x.now = s.clock.Now()
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	if cfg.QueueRequests > 0 {
		if wait, ok := s.queueRoom(x.key, len(lines), x.now); !ok {
			var extra http.Header
			if wait > 0 {
				extra = http.Header{"Retry-After": {retryAfterSeconds(wait)}}
			}
			x.fail(&apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", message: fmt.Sprintf(
				"This request would exceed your organization's (%s) limit of %s batch requests in the processing queue. "+
					"Please try again once some batches have finished processing.", s.cfg.OrgID, thousands(cfg.QueueRequests))}, extra)
			return
		}
	}
	b := &mockBatch{id: newID("msgbatch_"), proto: protoAnthropic, key: x.key, created: x.now, start: x.now,
		expires: x.now.Add(cfg.Window), lines: lines}
	s.decideLines(b)
	s.batches.batches[b.id] = b
	s.batches.created[x.key]++
	x.commonHeaders("application/json")
	writeJSON(x.w, http.StatusOK, s.messageBatchObject(x, b))
	s.stats.status(x.key, http.StatusOK)
}

// decideLines fixes when each line finishes and which fail with a server
// error (in the protocol's shape). s.batches.mu must be held.
func (s *Server) decideLines(b *mockBatch) {
	cfg := s.cfg.Batch
	b.lastDone = lineTimes(b.lines, s.cfg.Seed, b.start, cfg.Processing)
	for i := range failedLines(b.lines, s.cfg.Seed, cfg.ErrorRate) {
		l := &b.lines[i]
		if !l.ok {
			continue // already errored (invalid params)
		}
		l.ok, l.status, l.in, l.out = false, http.StatusInternalServerError, 0, 0
		e := &apiError{status: http.StatusInternalServerError, typ: "api_error", message: "Internal server error"}
		if b.proto == protoOpenAI {
			e.typ, e.message = "server_error", "The server had an error while processing your request. Sorry about that!"
			l.body, _ = json.Marshal(openAIErrorBody(e))
		} else {
			l.body, _ = json.Marshal(anthropicErrorBody(l.requestID, e, nil))
		}
	}
}

// anthropicBatchLine decides one request: its reply, or the error its
// params get.
func (s *Server) anthropicBatchLine(id string, params json.RawMessage) batchLine {
	l := batchLine{customID: id, requestID: newID("req_")}
	req, aerr := parseAnthropic(params, true)
	if aerr == nil && req.stream {
		aerr = invalid("stream: Message Batches do not support streaming")
	}
	if aerr != nil {
		l.status = aerr.status
		l.body, _ = json.Marshal(anthropicErrorBody(l.requestID, aerr, nil))
		return l
	}
	n := req.replyLength(s.cfg.OutputTokens, s.cfg.Seed, 0)
	msg := anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: req.model,
		Content:    []anthropicText{{Type: "text", Text: strings.Join(words(s.cfg.Seed, req.bodyHash, 0, n), "")}},
		StopReason: stopReason(n, req.maxTokens),
		Usage: anthropicUsage{InputTokens: req.inputTokens, OutputTokens: n,
			CacheCreation: &anthropicCacheCreation{}, ServiceTier: messageBatchTier}}
	l.ok, l.status, l.model, l.in, l.out = true, http.StatusOK, req.model, req.inputTokens, n
	l.body, _ = json.Marshal(msg)
	return l
}

// queueRoom reports whether n more lines fit key's processing queue, and
// if not how long until they would (0 when they never can).
// s.batches.mu must be held.
func (s *Server) queueRoom(key string, n int, now time.Time) (time.Duration, bool) {
	limit := s.cfg.Batch.QueueRequests
	if int64(n) > limit {
		return 0, false
	}
	var pending []time.Time
	for _, b := range s.batches.list(key, protoAnthropic) {
		for i := range b.lines {
			if b.lineState(&b.lines[i], now) == lineProcessing {
				pending = append(pending, minTime(b.lines[i].doneAt, b.expires))
			}
		}
	}
	over := int64(len(pending)+n) - limit
	if over <= 0 {
		return 0, true
	}
	slices.SortFunc(pending, time.Time.Compare)
	return pending[over-1].Sub(now), false
}

func (s *Server) messageBatchObject(x *exchange, b *mockBatch) messageBatchObject {
	now := x.now
	o := messageBatchObject{ID: b.id, Type: "message_batch", ProcessingStatus: "in_progress",
		CreatedAt: rfc3339(b.created), ExpiresAt: rfc3339(b.expires)}
	if !b.cancelAt.IsZero() {
		o.CancelInitiatedAt = rfc3339Ptr(b.cancelAt)
		o.ProcessingStatus = "canceling"
	}
	if !b.ended(s.cfg.Batch, now) {
		o.RequestCounts.Processing = len(b.lines) // the others stay 0 until the batch ends
		return o
	}
	o.ProcessingStatus = "ended"
	o.EndedAt = rfc3339Ptr(b.endAt(s.cfg.Batch))
	u := "http://" + x.r.Host + messageBatchesPath + "/" + b.id + "/results"
	o.ResultsURL = &u
	c := b.counts(now)
	o.RequestCounts = messageBatchCounts{Succeeded: c[lineSucceeded], Errored: c[lineErrored],
		Canceled: c[lineCanceled], Expired: c[lineExpired]}
	return o
}

// batchOrNotFound returns key's batch id of x's protocol, or answers 404.
// s.batches.mu must be held.
func (s *Server) batchOrNotFound(x *exchange, id string) *mockBatch {
	if b := s.batches.own(x.key, x.proto, id); b != nil {
		return b
	}
	if x.proto == protoOpenAI {
		x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
			message: fmt.Sprintf("Batch with ID '%s' not found.", id), param: "batch_id"}, nil)
	} else {
		x.fail(&apiError{status: http.StatusNotFound, typ: "not_found_error",
			message: fmt.Sprintf("Message batch with ID '%s' not found.", id)}, nil)
	}
	return nil
}

func (s *Server) getMessageBatch(x *exchange, id string) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	if b := s.batchOrNotFound(x, id); b != nil {
		x.replyJSON(s.messageBatchObject(x, b))
	}
}

func (s *Server) cancelMessageBatch(x *exchange, id string) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	b := s.batchOrNotFound(x, id)
	if b == nil {
		return
	}
	if b.ended(s.cfg.Batch, x.now) {
		x.fail(invalid("Message batch %s has already ended and cannot be canceled.", id), nil)
		return
	}
	if b.cancelAt.IsZero() {
		b.cancelAt = x.now
	}
	x.replyJSON(s.messageBatchObject(x, b))
}

func (s *Server) deleteMessageBatch(x *exchange, id string) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	b := s.batchOrNotFound(x, id)
	if b == nil {
		return
	}
	if !b.ended(s.cfg.Batch, x.now) {
		x.fail(invalid("Message batch %s is still in progress: a batch can be deleted once it has ended (cancel it first).", id), nil)
		return
	}
	s.batches.delete(b, s.cfg.Batch, x.now)
	x.replyJSON(map[string]string{"id": id, "type": "message_batch_deleted"})
}

// messageBatchResults writes the JSONL results, in the order the lines
// finished.
func (s *Server) messageBatchResults(x *exchange, id string) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	b := s.batchOrNotFound(x, id)
	if b == nil {
		return
	}
	if !b.ended(s.cfg.Batch, x.now) {
		x.fail(&apiError{status: http.StatusNotFound, typ: "not_found_error",
			message: fmt.Sprintf("Message batch %s has not ended: its results are available once processing_status is ended.", id)}, nil)
		return
	}
	x.commonHeaders("application/x-jsonl")
	x.w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(x.w)
	for _, i := range b.byDone() {
		l := &b.lines[i]
		var result string
		switch st := b.lineState(l, x.now); st {
		case lineSucceeded:
			result = `{"type":"succeeded","message":` + string(l.body) + `}`
		case lineErrored:
			result = `{"type":"errored","error":` + string(l.body) + `}`
		default:
			result = `{"type":"` + st + `"}`
		}
		_, _ = fmt.Fprintf(bw, `{"custom_id":%s,"result":%s}`+"\n", strconv.Quote(l.customID), result)
	}
	_ = bw.Flush()
	s.stats.status(x.key, http.StatusOK)
}

// listMessageBatches pages key's batches, newest first: limit (1 to
// 1000, default 20), before_id or after_id.
func (s *Server) listMessageBatches(x *exchange) {
	q := x.r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 20, 1000)
	if !ok {
		x.fail(invalid("limit: Input should be an integer between 1 and 1000"), nil)
		return
	}
	before, after := q.Get("before_id"), q.Get("after_id")
	if before != "" && after != "" {
		x.fail(invalid("before_id and after_id cannot both be set"), nil)
		return
	}
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	all := s.batches.list(x.key, protoAnthropic)
	page, more := pageOf(all, func(b *mockBatch) string { return b.id }, before, after, limit)
	out := struct {
		Data    []messageBatchObject `json:"data"`
		HasMore bool                 `json:"has_more"`
		FirstID *string              `json:"first_id"`
		LastID  *string              `json:"last_id"`
	}{Data: []messageBatchObject{}, HasMore: more}
	for _, b := range page {
		out.Data = append(out.Data, s.messageBatchObject(x, b))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	x.replyJSON(out)
}

// pageOf cuts a page of at most limit items out of all (newest first):
// those just after the item named after, or just before the one named
// before (an unknown cursor gives an empty page); more tells whether
// items remain beyond the page in the direction of travel.
func pageOf[T any](all []T, id func(T) string, before, after string, limit int) ([]T, bool) {
	find := func(cursor string) int {
		return slices.IndexFunc(all, func(t T) bool { return id(t) == cursor })
	}
	switch {
	case after != "":
		i := find(after)
		if i < 0 {
			return nil, false
		}
		rest := all[i+1:]
		return rest[:min(limit, len(rest))], len(rest) > limit
	case before != "":
		i := find(before)
		if i < 0 {
			return nil, false
		}
		rest := all[:i]
		from := max(0, len(rest)-limit)
		return rest[from:], from > 0
	}
	return all[:min(limit, len(all))], len(all) > limit
}
