package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// POST /v1/responses: the OpenAI Responses API (spec §2.6), per key, on the
// key's OpenAI RPM and TPM buckets and prompt cache. A response is one
// output message (preceded by a reasoning item when reasoning.effort is set
// and not "none": a third of the output tokens are then reasoning), whose
// length is drawn like a chat completion's within max_output_tokens
// (Config.DefaultMaxTokens when absent); filling it makes the response
// incomplete (reason max_output_tokens). Input tokens include the previous
// turn's input and output when previous_response_id names one of the key's
// responses. background: true answers at once with a queued response that
// moves to in_progress and completed on the mock's clock
// (Config.BackgroundQueue, then TTFT and PerToken); it can be cancelled.
// An injected stream fault fails a stream with response.failed, and a
// background response with status failed.

// responseUsage is a response's usage (the SDKs' ResponseUsage).
type responseUsage struct {
	InputTokens         int64            `json:"input_tokens"`
	InputTokensDetails  map[string]int64 `json:"input_tokens_details"`
	OutputTokens        int64            `json:"output_tokens"`
	OutputTokensDetails map[string]int64 `json:"output_tokens_details"`
	TotalTokens         int64            `json:"total_tokens"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responseReasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// responseObject is the Response object.
type responseObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	CompletedAt        *int64            `json:"completed_at"`
	Error              *responseError    `json:"error"`
	IncompleteDetails  map[string]string `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int64            `json:"max_output_tokens"`
	Metadata           json.RawMessage   `json:"metadata"`
	Model              string            `json:"model"`
	Output             []map[string]any  `json:"output"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	Reasoning          responseReasoning `json:"reasoning"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        float64           `json:"temperature"`
	Text               map[string]any    `json:"text"`
	ToolChoice         string            `json:"tool_choice"`
	Tools              json.RawMessage   `json:"tools"`
	TopP               float64           `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *responseUsage    `json:"usage"`
	User               *string           `json:"user"`
}

// failedMessage is the error of a response failed by an injected fault.
const failedMessage = "The server had an error while processing your request. Sorry about that!"

// usage is the response's usage when produced output tokens exist.
func (sr *storedResponse) usage(produced int64) *responseUsage {
	return &responseUsage{
		InputTokens:         sr.req.inputTokens,
		InputTokensDetails:  map[string]int64{"cached_tokens": sr.cached},
		OutputTokens:        produced,
		OutputTokensDetails: map[string]int64{"reasoning_tokens": min(produced, sr.tl.reasoning)},
		TotalTokens:         sr.req.inputTokens + produced,
	}
}

// textPart is an output_text content part.
func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// reasoningItem and messageItem are the output items in a given status.
func (sr *storedResponse) reasoningItem() map[string]any {
	return map[string]any{"id": sr.reasoningID, "type": "reasoning", "summary": []any{}}
}

func (sr *storedResponse) messageItem(status string, text string, parts bool) map[string]any {
	content := []any{}
	if parts {
		content = []any{textPart(text)}
	}
	return map[string]any{"id": sr.messageID, "type": "message", "status": status, "role": "assistant", "content": content}
}

// render is the Response object at now.
func (sr *storedResponse) render(now time.Time) responseObject {
	st, produced := sr.state(now)
	return sr.renderAs(st, produced)
}

// renderAs is the Response object in status st with produced output
// tokens.
func (sr *storedResponse) renderAs(st string, produced int64) responseObject {
	q := sr.req
	o := responseObject{ID: sr.id, Object: "response", CreatedAt: sr.created.Unix(), Status: st, Background: q.background,
		Instructions: q.instructions, MaxOutputTokens: q.maxOutput, Metadata: q.metadata, Model: q.model,
		Output: []map[string]any{}, ParallelToolCalls: true, PromptCacheKey: q.cacheKey,
		Reasoning: responseReasoning{Effort: q.effort}, ServiceTier: sr.tier, Store: q.store, Temperature: 1,
		Text: map[string]any{"format": map[string]string{"type": "text"}}, ToolChoice: "auto", Tools: q.tools,
		TopP: 1, Truncation: "disabled"}
	if o.Metadata == nil {
		o.Metadata = json.RawMessage("{}")
	}
	if o.Tools == nil {
		o.Tools = json.RawMessage("[]")
	}
	if q.previousID != "" {
		o.PreviousResponseID = &q.previousID
	}
	if sr.tl.reasoning > 0 && produced > 0 {
		o.Output = append(o.Output, sr.reasoningItem())
	}
	if visible := produced - sr.tl.reasoning; visible > 0 {
		itemStatus := st
		if !terminal(st) {
			itemStatus = statusInProgress
		} else if st != statusIncomplete {
			itemStatus = statusCompleted
		}
		o.Output = append(o.Output, sr.messageItem(itemStatus, strings.Join(sr.words[:visible], ""), true))
	}
	switch st {
	case statusCompleted:
		at := sr.tl.end().Unix()
		o.CompletedAt = &at
	case statusIncomplete:
		o.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	case statusFailed:
		o.Error = &responseError{Code: "server_error", Message: failedMessage}
	}
	if terminal(st) {
		o.Usage = sr.usage(produced)
	}
	return o
}

// previousTurn resolves previous_response_id for key at now.
func (s *Server) previousTurn(key string, now time.Time) func(id string) (*prompt, *apiError) {
	return func(id string) (*prompt, *apiError) {
		var convo *prompt
		var st string
		if !s.responses.with(key, id, func(sr *storedResponse) {
			st, _ = sr.state(now)
			convo = sr.conversation(now)
		}) {
			return nil, openAIInvalid("previous_response_id", "previous_response_not_found",
				"Previous response with id '%s' not found.", id)
		}
		if !terminal(st) {
			return nil, openAIInvalid("previous_response_id", "invalid_value",
				"Previous response with id '%s' is still %s.", id, strings.ReplaceAll(st, "_", " "))
		}
		return convo, nil
	}
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseResponses(body, s.cfg.DefaultMaxTokens, s.previousTurn(x.key, x.now))
	if aerr != nil {
		x.rl = s.quotas.peekHeaders(scopeOpenAI, x.key, x.now)
		x.fail(aerr, nil)
		return
	}
	f := s.faults.decide(x.now)
	if f.kind != faultNone {
		x.rl = s.quotas.peekHeaders(scopeOpenAI, x.key, x.now)
		x.sendFault(f)
		return
	}
	tier := openAIServedTier(req.tier)
	if x.flexUnavailable(tier) {
		return
	}
	a, ok := x.admitOpenAI(req.request, true)
	if !ok {
		return
	}
	sr := s.newStoredResponse(x, req, tier, a, f)
	sr.ticket = s.stats.admit(x.key, x.now, admitted{endpoint: EndpointResponses, tier: tier,
		cache: CacheCounts{PromptTokens: req.inputTokens, ReadTokens: a.cacheRead}})
	if req.store {
		s.responses.put(sr)
	}
	if req.background {
		// Settled now: the output is known, and a cancel gives back what
		// is not produced.
		sr.charged = sr.tl.limit()
		s.quotas.chargeOutput(scopeOpenAI, x.key, sr.charged-a.reserved, x.now)
		sr.ticket.finish(Counts{Requests: 1, InputTokens: req.inputTokens, OutputTokens: sr.charged, Tokens: req.inputTokens + sr.charged})
		if !req.stream {
			x.replyJSON(sr.renderAs(statusQueued, 0))
			return
		}
	}
	var produced int64
	if req.stream {
		produced = x.streamResponse(sr)
	} else {
		produced = x.replyResponse(sr)
	}
	if !req.background {
		s.quotas.chargeOutput(scopeOpenAI, x.key, produced-a.reserved, s.clock.Now())
		sr.ticket.finish(Counts{Requests: 1, InputTokens: req.inputTokens, OutputTokens: produced, Tokens: req.inputTokens + produced})
	}
}

// newStoredResponse draws the response's output and timeline.
func (s *Server) newStoredResponse(x *exchange, req responsesRequest, tier string, a admission, f fault) *storedResponse {
	ttft, per := s.pace(tier)
	n := outputLength(s.cfg.OutputTokens, s.cfg.Seed, req.bodyHash, 0, req.maxTokens)
	var reasoning int64
	if req.effort != nil && *req.effort != "none" {
		reasoning = n / 3
	}
	start := x.now
	if req.background {
		start = start.Add(s.cfg.BackgroundQueue)
	}
	failAfter := int64(-1)
	if f.streamErrorAfter >= 0 && (req.stream || req.background) {
		failAfter = int64(f.streamErrorAfter)
	}
	sr := &storedResponse{id: hexID("resp_"), key: x.key, created: x.now, req: req, tier: tier,
		tl:     responseTimeline{start: start, first: f.slow + ttft, per: per, n: n, reasoning: reasoning, failAfter: failAfter},
		words:  words(s.cfg.Seed, req.bodyHash, 0, n-reasoning),
		cached: a.cacheRead, maxOut: req.maxTokens, messageID: hexID("msg_")}
	if reasoning > 0 {
		sr.reasoningID = hexID("rs_")
	}
	return sr
}

// replyResponse answers a foreground request when its response is done;
// it returns the output tokens produced (those up to the moment the client
// left, which stops the response).
func (x *exchange) replyResponse(sr *storedResponse) int64 {
	if !x.sleep(sr.tl.end().Sub(x.now)) {
		left := x.s.clock.Now()
		x.s.responses.with(x.key, sr.id, func(sr *storedResponse) { sr.stoppedAt = left })
		x.s.stats.status(x.key, 499)
		return sr.tl.produced(left)
	}
	obj := sr.render(sr.tl.end())
	x.replyJSON(obj)
	return sr.tl.limit()
}
