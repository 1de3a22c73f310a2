package mock

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Responses are remembered per API key (another key gets 404, as another
// project does on the real API). A stored response's state is a function of
// the mock's clock: its timeline fixes when it leaves the queue
// (background), when each output token exists, and when it completes or
// fails; a cancel or a client that leaves freezes it. GET, DELETE, cancel
// and input_items read and change the store; they take no quota and carry
// no rate-limit headers.

// responseTimeline is when a response's output tokens exist: reasoning
// tokens first, then the visible ones.
type responseTimeline struct {
	start     time.Time     // generation starts (after the background queue)
	first     time.Duration // until the first token: slowness + TTFT
	per       time.Duration // each further token
	n         int64         // output tokens in all
	reasoning int64         // of which reasoning
	// failAfter is the visible tokens produced before an injected failure;
	// -1 for none.
	failAfter int64
}

// limit is how many tokens are produced before the response ends.
func (tl responseTimeline) limit() int64 {
	if tl.failAfter >= 0 {
		return min(tl.n, tl.reasoning+tl.failAfter)
	}
	return tl.n
}

// tokenAt is when token i (0-based) exists.
func (tl responseTimeline) tokenAt(i int64) time.Time {
	return tl.start.Add(tl.first + time.Duration(i)*tl.per)
}

// end is when the response completes (or fails).
func (tl responseTimeline) end() time.Time {
	if tl.limit() == 0 {
		return tl.start
	}
	return tl.tokenAt(tl.limit() - 1)
}

// produced is how many tokens exist at t.
func (tl responseTimeline) produced(t time.Time) int64 {
	lim := tl.limit()
	switch {
	case lim == 0 || t.Before(tl.tokenAt(0)):
		return 0
	case !t.Before(tl.end()):
		return lim
	}
	// per > 0 here: with per 0 every token exists at tokenAt(0) = end().
	return min(lim, 1+int64(t.Sub(tl.tokenAt(0))/tl.per))
}

// storedResponse is one response of one key.
type storedResponse struct {
	id      string
	key     string
	created time.Time
	req     responsesRequest
	tier    string
	tl      responseTimeline
	words   []string // the visible output
	cached  int64    // input tokens read from the cache
	maxOut  int64    // the bound that makes it incomplete
	// reasoningID and messageID name the output items.
	reasoningID, messageID string
	// stoppedAt freezes the response: a cancel, or a client that left a
	// foreground request.
	stoppedAt time.Time
	// ticket and charged settle a cancelled background response.
	ticket  ticket
	charged int64
}

// Response statuses.
const (
	statusQueued     = "queued"
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusIncomplete = "incomplete"
	statusFailed     = "failed"
	statusCancelled  = "cancelled"
)

func terminal(status string) bool {
	return status != statusQueued && status != statusInProgress
}

// state is the response's status at now and the tokens produced by then.
func (sr *storedResponse) state(now time.Time) (string, int64) {
	if !sr.stoppedAt.IsZero() && !now.Before(sr.stoppedAt) {
		st, produced := sr.running(sr.stoppedAt)
		if !terminal(st) {
			return statusCancelled, produced
		}
		return st, produced
	}
	return sr.running(now)
}

func (sr *storedResponse) running(now time.Time) (string, int64) {
	tl := sr.tl
	switch {
	case now.Before(tl.start):
		return statusQueued, 0
	case now.Before(tl.end()):
		return statusInProgress, tl.produced(now)
	case tl.failAfter >= 0:
		return statusFailed, tl.limit()
	case tl.n >= sr.maxOut:
		return statusIncomplete, tl.n
	}
	return statusCompleted, tl.n
}

// conversation is what a later turn carries over: this turn's input and
// its output text.
func (sr *storedResponse) conversation(now time.Time) *prompt {
	_, produced := sr.state(now)
	c := &prompt{}
	c.blocks = append(c.blocks, sr.req.prompt.blocks[sr.req.convoFrom:]...)
	for _, b := range c.blocks {
		c.bytes += len(b.text)
	}
	visible := max(0, produced-sr.tl.reasoning)
	if visible > 0 {
		c.add(strings.Join(sr.words[:visible], ""))
	}
	for i := range c.blocks {
		c.blocks[i].ttl = 0
	}
	return c
}

// maxStoredResponses bounds one key's store; the oldest go first.
const maxStoredResponses = 10_000

type keyResponses struct {
	byID  map[string]*storedResponse
	order []string
}

// responseStore holds every key's responses.
type responseStore struct {
	mu   sync.Mutex
	keys map[string]*keyResponses
}

func newResponseStore() *responseStore { return &responseStore{keys: map[string]*keyResponses{}} }

func (rs *responseStore) put(sr *storedResponse) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	kr := rs.keys[sr.key]
	if kr == nil {
		kr = &keyResponses{byID: map[string]*storedResponse{}}
		rs.keys[sr.key] = kr
	}
	if len(kr.order) >= maxStoredResponses {
		delete(kr.byID, kr.order[0])
		kr.order = slices.Delete(kr.order, 0, 1)
	}
	kr.byID[sr.id] = sr
	kr.order = append(kr.order, sr.id)
}

// with runs fn on key's response id under the store's lock; false when
// there is none.
func (rs *responseStore) with(key, id string, fn func(*storedResponse)) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	kr := rs.keys[key]
	if kr == nil || kr.byID[id] == nil {
		return false
	}
	fn(kr.byID[id])
	return true
}

func (rs *responseStore) delete(key, id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	kr := rs.keys[key]
	if kr == nil || kr.byID[id] == nil {
		return false
	}
	delete(kr.byID, id)
	kr.order = slices.DeleteFunc(kr.order, func(s string) bool { return s == id })
	return true
}

func (rs *responseStore) reset() {
	rs.mu.Lock()
	rs.keys = map[string]*keyResponses{}
	rs.mu.Unlock()
}

// handleResponsePath serves /v1/responses/{id}, …/cancel and
// …/input_items; false when the path is none of them.
func (s *Server) handleResponsePath(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/responses/")
	if !ok || rest == "" {
		return false
	}
	id, action, _ := strings.Cut(rest, "/")
	var method string
	var h func(*exchange, string)
	switch action {
	case "":
		switch r.Method {
		case http.MethodGet:
			method, h = http.MethodGet, s.getResponse
		case http.MethodDelete:
			method, h = http.MethodDelete, s.deleteResponse
		default:
			method = ""
		}
	case "cancel":
		method, h = http.MethodPost, s.cancelResponse
	case "input_items":
		method, h = http.MethodGet, s.listInputItems
	default:
		return false
	}
	if r.Method != method {
		s.notFound(w, r, http.StatusMethodNotAllowed)
		return true
	}
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return true
	}
	h(x, id)
	return true
}

func (x *exchange) responseNotFound(id string) {
	x.fail(&apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		message: "Response with id '" + id + "' not found."}, nil)
}

func (x *exchange) replyJSON(v any) {
	x.commonHeaders("application/json")
	writeJSON(x.w, http.StatusOK, v)
	x.s.stats.status(x.key, http.StatusOK)
}

func (s *Server) getResponse(x *exchange, id string) {
	if x.r.URL.Query().Get("stream") == "true" {
		x.fail(openAIInvalid("stream", "unsupported_value", "Streaming a stored response is not simulated by the mock."), nil)
		return
	}
	var obj responseObject
	if !s.responses.with(x.key, id, func(sr *storedResponse) { obj = sr.render(x.now) }) {
		x.responseNotFound(id)
		return
	}
	x.replyJSON(obj)
}

func (s *Server) deleteResponse(x *exchange, id string) {
	if !s.responses.delete(x.key, id) {
		x.responseNotFound(id)
		return
	}
	x.replyJSON(map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// cancelResponse cancels a background response that has not finished:
// its output stops at the tokens produced so far, and the quota and the
// statistics get back what it will not produce. Cancelling a cancelled
// response answers it again; a finished or foreground one is a 400.
func (s *Server) cancelResponse(x *exchange, id string) {
	var obj responseObject
	var aerr *apiError
	found := s.responses.with(x.key, id, func(sr *storedResponse) {
		st, produced := sr.state(x.now)
		switch {
		case !sr.req.background:
			aerr = openAIInvalid("", "", "Only responses created with background=true can be cancelled.")
			return
		case st == statusCancelled:
		case terminal(st):
			aerr = openAIInvalid("", "", "Cannot cancel a response with status '%s'.", st)
			return
		default:
			sr.stoppedAt = x.now
			if back := sr.charged - produced; back > 0 {
				s.quotas.chargeOutput(scopeOpenAI, sr.key, -back, x.now)
				sr.ticket.correct(Counts{OutputTokens: back, Tokens: back})
				sr.charged = produced
			}
		}
		obj = sr.render(x.now)
	})
	switch {
	case !found:
		x.responseNotFound(id)
	case aerr != nil:
		x.fail(aerr, nil)
	default:
		x.replyJSON(obj)
	}
}

// listInputItems lists a response's input items: limit (1–100, default
// 20), order (desc by default, or asc) and after (an item id).
func (s *Server) listInputItems(x *exchange, id string) {
	q := x.r.URL.Query()
	limit, ok := queryLimit(q.Get("limit"), 20, 100)
	if !ok {
		x.fail(openAIInvalid("limit", "invalid_value", "Invalid 'limit': expected an integer between 1 and 100."), nil)
		return
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		x.fail(openAIInvalid("order", "invalid_value", "Invalid 'order': expected 'asc' or 'desc'."), nil)
		return
	}
	var items []map[string]any
	if !s.responses.with(x.key, id, func(sr *storedResponse) { items = slices.Clone(sr.req.items) }) {
		x.responseNotFound(id)
		return
	}
	if order != "asc" {
		slices.Reverse(items)
	}
	if after := q.Get("after"); after != "" {
		for i, it := range items {
			if it["id"] == after {
				items = items[i+1:]
				break
			}
		}
	}
	more := len(items) > limit
	items = items[:min(limit, len(items))]
	list := map[string]any{"object": "list", "data": items, "has_more": more, "first_id": nil, "last_id": nil}
	if len(items) > 0 {
		list["first_id"], list["last_id"] = items[0]["id"], items[len(items)-1]["id"]
	}
	x.replyJSON(list)
}
