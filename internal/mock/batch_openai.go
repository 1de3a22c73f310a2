package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// OpenAI's Batch API: POST/GET /v1/batches, GET …/{id}, POST …/{id}/cancel.
// The input file is validated at creation (every line, as OpenAI does
// while the batch is "validating"): a batch with an invalid line, or one
// over the enqueued-token limit, is created and then fails, with its
// errors. When a batch ends its output file (the succeeded lines) and
// error file (the others) are made, in the order the lines finished.

const openAIBatchesPath = "/v1/batches"

// openAIBatchEndpoints are the endpoints a batch may target.
var openAIBatchEndpoints = []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"}

type openAIBatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// openAIBatchInfo is what an OpenAI batch adds to mockBatch.
type openAIBatchInfo struct {
	endpoint    string
	inputFileID string
	metadata    map[string]string
	// outputFileID and errorFileID name its files once they are made
	// (settleFiles).
	outputFileID, errorFileID string
	filesMade                 bool
}

type openAIBatchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

type openAIBatchUsage struct {
	InputTokens         int64            `json:"input_tokens"`
	InputTokensDetails  map[string]int64 `json:"input_tokens_details"`
	OutputTokens        int64            `json:"output_tokens"`
	OutputTokensDetails map[string]int64 `json:"output_tokens_details"`
	TotalTokens         int64            `json:"total_tokens"`
}

type openAIBatchErrors struct {
	Object string             `json:"object"`
	Data   []openAIBatchError `json:"data"`
}

type openAIBatchObject struct {
	ID               string             `json:"id"`
	Object           string             `json:"object"`
	Endpoint         string             `json:"endpoint"`
	Errors           *openAIBatchErrors `json:"errors"`
	InputFileID      string             `json:"input_file_id"`
	CompletionWindow string             `json:"completion_window"`
	Status           string             `json:"status"`
	OutputFileID     *string            `json:"output_file_id"`
	ErrorFileID      *string            `json:"error_file_id"`
	CreatedAt        int64              `json:"created_at"`
	InProgressAt     *int64             `json:"in_progress_at"`
	ExpiresAt        int64              `json:"expires_at"`
	FinalizingAt     *int64             `json:"finalizing_at"`
	CompletedAt      *int64             `json:"completed_at"`
	FailedAt         *int64             `json:"failed_at"`
	ExpiredAt        *int64             `json:"expired_at"`
	CancellingAt     *int64             `json:"cancelling_at"`
	CancelledAt      *int64             `json:"cancelled_at"`
	RequestCounts    openAIBatchCounts  `json:"request_counts"`
	Usage            openAIBatchUsage   `json:"usage"`
	Metadata         map[string]string  `json:"metadata"`
}

// batchHexID is prefix and 32 hex digits (batch_…, batch_req_…).
func batchHexID(prefix string) string { return prefix + hexID("")[:32] }

func unix(t time.Time) *int64 {
	u := t.Unix()
	return &u
}

func (s *Server) serveOpenAIBatches(w http.ResponseWriter, r *http.Request, rest string) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	id, action, _ := strings.Cut(rest, "/")
	switch {
	case id == "" && r.Method == http.MethodPost:
		s.createOpenAIBatch(x)
	case id == "" && r.Method == http.MethodGet:
		s.listOpenAIBatches(x)
	case id != "" && action == "" && r.Method == http.MethodGet:
		s.withOpenAIBatch(x, id, func(b *mockBatch) { x.replyJSON(s.openAIBatchObject(b, x.now)) })
	case id != "" && action == "cancel" && r.Method == http.MethodPost:
		s.withOpenAIBatch(x, id, func(b *mockBatch) {
			if st := s.openAIBatchObject(b, x.now).Status; st != "validating" && st != "in_progress" && st != "finalizing" {
				x.fail(openAIInvalid("", "", "Cannot cancel a batch with status '%s'.", st), nil)
				return
			}
			b.cancelAt = x.now
			x.replyJSON(s.openAIBatchObject(b, x.now))
		})
	case id != "" && (action == "" || action == "cancel"):
		x.fail(&apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: fmt.Sprintf("Method %s not allowed for %s", r.Method, r.URL.Path)}, nil)
	default:
		x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)}, nil)
	}
}

func (s *Server) withOpenAIBatch(x *exchange, id string, fn func(*mockBatch)) {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	if b := s.batchOrNotFound(x, id); b != nil {
		s.settleFiles(x.key, x.now)
		fn(b)
	}
}

func (s *Server) createOpenAIBatch(x *exchange) {
	body := x.body()
	if body == nil {
		return
	}
	var req struct {
		InputFileID      *string           `json:"input_file_id"`
		Endpoint         *string           `json:"endpoint"`
		CompletionWindow *string           `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		x.fail(openAIInvalid("", "", "We could not parse the JSON body of your request. (%v)", err), nil)
		return
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"input_file_id", req.InputFileID}, {"endpoint", req.Endpoint}, {"completion_window", req.CompletionWindow}} {
		if f.v == nil {
			x.fail(openAIInvalid(f.name, "missing_required_parameter", "Missing required parameter: '%s'.", f.name), nil)
			return
		}
	}
	switch {
	case !slices.Contains(openAIBatchEndpoints, *req.Endpoint):
		x.fail(openAIInvalid("endpoint", "invalid_value", "Invalid value for 'endpoint': supported values are '%s'.",
			strings.Join(openAIBatchEndpoints, "', '")), nil)
		return
	case *req.CompletionWindow != "24h":
		x.fail(openAIInvalid("completion_window", "invalid_value", "Invalid value for 'completion_window': supported values are '24h'."), nil)
		return
	case len(req.Metadata) > 16:
		x.fail(openAIInvalid("metadata", "invalid_value", "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got %d instead.", len(req.Metadata)), nil)
		return
	}
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	f := s.batches.files[*req.InputFileID]
	switch {
	case f == nil || f.key != x.key:
		x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "input_file_id",
			message: fmt.Sprintf("No such File object: %s", *req.InputFileID)}, nil)
		return
	case f.purpose != "batch":
		x.fail(openAIInvalid("input_file_id", "invalid_value", "Invalid 'input_file_id': file %s has purpose '%s', expected 'batch'.", f.id, f.purpose), nil)
		return
	}
	cfg := s.cfg.Batch
	b := &mockBatch{id: batchHexID("batch_"), proto: protoOpenAI, key: x.key, created: x.now,
		start: x.now.Add(cfg.Validation), expires: x.now.Add(cfg.Window),
		openai: &openAIBatchInfo{endpoint: *req.Endpoint, inputFileID: f.id, metadata: req.Metadata}}
	b.lines, b.failed = s.openAIBatchLines(x, f.content, *req.Endpoint)
	if len(b.failed) == 0 {
		b.failed = s.enqueuedTokens(x.key, b.lines, x.now)
	}
	if len(b.failed) > 0 {
		b.lines = nil
	} else {
		s.decideLines(b)
	}
	s.batches.batches[b.id] = b
	s.batches.created[x.key]++
	x.replyJSON(s.openAIBatchObject(b, x.now))
}

// openAIBatchLines validates an input file and decides its lines; the
// errors name their 1-based line.
func (s *Server) openAIBatchLines(x *exchange, content []byte, endpoint string) ([]batchLine, []openAIBatchError) {
	var lines []batchLine
	var errs []openAIBatchError
	lineErr := func(n int, code, param, format string, args ...any) {
		e := openAIBatchError{Code: code, Message: fmt.Sprintf(format, args...), Line: &n}
		if param != "" {
			e.Param = &param
		}
		errs = append(errs, e)
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(make([]byte, 0, 64<<10), len(content)+1)
	for n := 1; sc.Scan(); n++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l struct {
			CustomID *string         `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			lineErr(n, "invalid_json_line", "", "This line is not parseable as valid JSON.")
			continue
		}
		switch {
		case l.CustomID == nil || *l.CustomID == "":
			lineErr(n, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
			continue
		case l.Method != http.MethodPost:
			lineErr(n, "invalid_value", "method", "Invalid value for 'method': supported values are 'POST'.")
			continue
		case l.URL != endpoint:
			lineErr(n, "mismatched_endpoint", "url", "The provided URL '%s' does not match the batch endpoint '%s'.", l.URL, endpoint)
			continue
		case !present(l.Body) || l.Body[0] != '{':
			lineErr(n, "missing_required_parameter", "body", "Missing required parameter: 'body'.")
			continue
		}
		if first, dup := seen[*l.CustomID]; dup {
			lineErr(n, "duplicate_custom_id", "custom_id", "The custom_id '%s' is already used on line %d; custom_id must be unique within a batch.", *l.CustomID, first)
			continue
		}
		seen[*l.CustomID] = n
		line, aerr := s.openAIBatchLine(x, endpoint, *l.CustomID, l.Body)
		if aerr != nil {
			lineErr(n, cmpOr(aerr.code, "invalid_request"), "body."+aerr.param, "%s", aerr.message)
			continue
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, openAIBatchError{Code: "invalid_file", Message: "The file could not be read: " + err.Error()})
	}
	switch {
	case len(errs) > 0:
	case len(lines) == 0:
		errs = append(errs, openAIBatchError{Code: "empty_file", Message: "The batch input file is empty."})
	case len(lines) > s.cfg.Batch.maxRequests(protoOpenAI):
		errs = append(errs, openAIBatchError{Code: "too_many_tasks", Message: fmt.Sprintf(
			"The batch input file has %d requests; the limit is %d.", len(lines), s.cfg.Batch.maxRequests(protoOpenAI))})
	}
	return lines, errs
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// openAIBatchLine decides one request: its reply body and usage.
func (s *Server) openAIBatchLine(x *exchange, endpoint, id string, body []byte) (batchLine, *apiError) {
	l := batchLine{customID: id, requestID: newID("req_"), ok: true, status: http.StatusOK}
	var reply any
	switch endpoint {
	case "/v1/chat/completions":
		req, aerr := parseOpenAI(body, s.cfg.DefaultMaxTokens)
		if aerr == nil && req.stream {
			aerr = openAIInvalid("stream", "invalid_value", "Streaming is not supported in the Batch API.")
		}
		if aerr != nil {
			return l, aerr
		}
		c := openAICompletion{ID: newID("chatcmpl-"), Object: "chat.completion", Created: x.now.Unix(), Model: req.model,
			SystemFingerprint: systemFingerprint, ServiceTier: tierDefault}
		var total int64
		for i := range req.n {
			n := req.replyLength(s.cfg.OutputTokens, s.cfg.Seed, i)
			total += n
			c.Choices = append(c.Choices, openAIChoice{Index: i, Logprobs: jsonNull, FinishReason: finishReason(n, req.maxTokens),
				Message: openAIMessage{Role: "assistant", Content: strings.Join(words(s.cfg.Seed, req.bodyHash, i, n), "")}})
		}
		c.Usage = newOpenAIUsage(req.inputTokens, 0, total)
		reply, l.model, l.in, l.out = c, req.model, req.inputTokens, total
	case "/v1/embeddings":
		req, aerr := parseEmbeddings(body)
		if aerr != nil {
			return l, aerr
		}
		out := embeddingList{Object: "list", Model: req.model, Data: make([]embeddingData, len(req.inputs)),
			Usage: embeddingUsage{PromptTokens: req.inputTokens, TotalTokens: req.inputTokens}}
		for i, in := range req.inputs {
			v := embeddingVector(s.cfg.Seed, req.model, in.seed, req.dimensions)
			out.Data[i] = embeddingData{Object: "embedding", Index: i, Embedding: encodeEmbedding(v, req.base64)}
		}
		reply, l.model, l.in = out, req.model, req.inputTokens
	default: // /v1/responses
		req, aerr := parseResponses(body, s.cfg.DefaultMaxTokens, s.previousTurn(x.key, x.now))
		if aerr == nil && (req.stream || req.background) {
			aerr = openAIInvalid("stream", "invalid_value", "Streaming and background mode are not supported in the Batch API.")
		}
		if aerr != nil {
			return l, aerr
		}
		n := outputLength(s.cfg.OutputTokens, s.cfg.Seed, req.bodyHash, 0, req.maxTokens)
		var reasoning int64
		if req.effort != nil && *req.effort != "none" {
			reasoning = n / 3
		}
		sr := &storedResponse{id: hexID("resp_"), key: x.key, created: x.now, req: req, tier: tierDefault,
			tl:    responseTimeline{start: x.now, n: n, reasoning: reasoning, failAfter: -1},
			words: words(s.cfg.Seed, req.bodyHash, 0, n-reasoning), maxOut: req.maxTokens, messageID: hexID("msg_")}
		if reasoning > 0 {
			sr.reasoningID = hexID("rs_")
		}
		reply, l.model, l.in, l.out = sr.render(x.now), req.model, req.inputTokens, n
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return l, openAIInvalid("", "", "encoding the reply: %v", err)
	}
	l.body = b
	return l, nil
}

// enqueuedTokens checks lines against the enqueued-token limit of each of
// their models, counting the input tokens of key's unfinished batches.
// s.batches.mu must be held.
func (s *Server) enqueuedTokens(key string, lines []batchLine, now time.Time) []openAIBatchError {
	limit := s.cfg.Batch.EnqueuedTokens
	if limit <= 0 {
		return nil
	}
	need := map[string]int64{}
	for _, l := range lines {
		need[l.model] += l.in
	}
	for _, b := range s.batches.list(key, protoOpenAI) {
		if b.ended(s.cfg.Batch, now) {
			continue
		}
		for _, l := range b.lines {
			if _, ok := need[l.model]; ok {
				need[l.model] += l.in
			}
		}
	}
	for _, m := range slices.Sorted(maps.Keys(need)) {
		if need[m] > limit {
			return []openAIBatchError{{Code: "token_limit_exceeded", Message: fmt.Sprintf(
				"Enqueued token limit reached for %s in organization %s. Limit: %s enqueued tokens. "+
					"Please try again once some in_progress batches have been completed.", m, openAIOrg(s.cfg.OrgID), thousands(limit))}}
		}
	}
	return nil
}

// openAIBatchObject renders b at now.
func (s *Server) openAIBatchObject(b *mockBatch, now time.Time) openAIBatchObject {
	cfg := s.cfg.Batch
	o := openAIBatchObject{ID: b.id, Object: "batch", Endpoint: b.openai.endpoint, InputFileID: b.openai.inputFileID,
		CompletionWindow: "24h", CreatedAt: b.created.Unix(), ExpiresAt: b.expires.Unix(), Metadata: b.openai.metadata,
		Usage: openAIBatchUsage{InputTokensDetails: map[string]int64{"cached_tokens": 0},
			OutputTokensDetails: map[string]int64{"reasoning_tokens": 0}}}
	if now.Before(b.start) && b.cancelAt.IsZero() {
		o.Status = "validating" // the file is not read yet: nothing counted
		return o
	}
	o.RequestCounts.Total = len(b.lines)
	if len(b.failed) > 0 {
		o.Status, o.FailedAt = "failed", unix(b.start)
		o.Errors = &openAIBatchErrors{Object: "list", Data: b.failed}
		return o
	}
	for i := range b.lines {
		l := &b.lines[i]
		switch b.lineState(l, now) {
		case lineSucceeded:
			o.RequestCounts.Completed++
			o.Usage.InputTokens += l.in
			o.Usage.OutputTokens += l.out
		case lineErrored:
			o.RequestCounts.Failed++
		}
	}
	o.Usage.TotalTokens = o.Usage.InputTokens + o.Usage.OutputTokens
	if !b.start.After(now) {
		o.InProgressAt = unix(b.start)
	}
	end := b.endAt(cfg)
	ended := !now.Before(end)
	switch {
	case !b.cancelAt.IsZero():
		o.CancellingAt = unix(b.cancelAt)
		o.Status = "cancelling"
		if ended {
			o.Status, o.CancelledAt = "cancelled", unix(end)
		}
	case b.lastDone.After(b.expires) && ended:
		o.Status, o.ExpiredAt = "expired", unix(end)
	case now.Before(b.lastDone):
		o.Status = "in_progress"
	case !ended:
		o.Status, o.FinalizingAt = "finalizing", unix(b.lastDone)
	default:
		o.Status, o.FinalizingAt, o.CompletedAt = "completed", unix(b.lastDone), unix(end)
	}
	if ended {
		o.OutputFileID = nullable(b.openai.outputFileID)
		o.ErrorFileID = nullable(b.openai.errorFileID)
	}
	return o
}

// settleFiles makes the output and error files of key's OpenAI batches
// that have ended. s.batches.mu must be held.
func (s *Server) settleFiles(key string, now time.Time) {
	for _, b := range s.batches.list(key, protoOpenAI) {
		if b.openai.filesMade || len(b.failed) > 0 || !b.ended(s.cfg.Batch, now) {
			continue
		}
		b.openai.filesMade = true
		var out, errs bytes.Buffer
		for _, i := range b.byDone() {
			l := &b.lines[i]
			st := b.lineState(l, now)
			line := openAIResultLine{ID: batchHexID("batch_req_"), CustomID: l.customID}
			switch st {
			case lineSucceeded, lineErrored:
				line.Response = &openAIResultResponse{StatusCode: l.status, RequestID: l.requestID, Body: l.body}
			case lineExpired:
				line.Error = &openAIResultError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
			default:
				line.Error = &openAIResultError{Code: "batch_cancelled", Message: "This request was cancelled before it could be executed."}
			}
			enc, _ := json.Marshal(line)
			dst := &errs
			if st == lineSucceeded {
				dst = &out
			}
			dst.Write(enc)
			dst.WriteByte('\n')
		}
		for _, f := range []struct {
			buf  *bytes.Buffer
			id   *string
			name string
		}{{&out, &b.openai.outputFileID, "output"}, {&errs, &b.openai.errorFileID, "error"}} {
			if f.buf.Len() == 0 {
				continue
			}
			file := &mockFile{id: fileID(), key: key, purpose: "batch_output", filename: b.id + "_" + f.name + ".jsonl",
				created: b.endAt(s.cfg.Batch), content: f.buf.Bytes()}
			s.batches.files[file.id] = file
			*f.id = file.id
		}
	}
}

type openAIResultResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type openAIResultError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type openAIResultLine struct {
	ID       string                `json:"id"`
	CustomID string                `json:"custom_id"`
	Response *openAIResultResponse `json:"response"`
	Error    *openAIResultError    `json:"error"`
}

// listOpenAIBatches pages key's batches, newest first (after, limit 1 to
// 100, default 20).
func (s *Server) listOpenAIBatches(x *exchange) {
	q := x.r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 20, 100)
	if !ok {
		x.fail(openAIInvalid("limit", "invalid_value", "Invalid 'limit': expected an integer between 1 and 100."), nil)
		return
	}
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	s.settleFiles(x.key, x.now)
	page, more := pageOf(s.batches.list(x.key, protoOpenAI), func(b *mockBatch) string { return b.id }, "", q.Get("after"), limit)
	out := openAIPage[openAIBatchObject]{Object: "list", Data: []openAIBatchObject{}, HasMore: more}
	for _, b := range page {
		out.Data = append(out.Data, s.openAIBatchObject(b, x.now))
	}
	out.ends(func(o openAIBatchObject) string { return o.ID })
	x.replyJSON(out)
}
