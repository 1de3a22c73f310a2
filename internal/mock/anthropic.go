package mock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Anthropic Messages API wire shapes (spec §1.4–1.6), written by the mock
// itself.

type anthropicErrorDetail struct {
	Type    string            `json:"type"`
	Message string            `json:"message"`
	Details map[string]string `json:"details,omitempty"`
}

type anthropicError struct {
	Type      string               `json:"type"`
	Error     anthropicErrorDetail `json:"error"`
	RequestID string               `json:"request_id,omitempty"`
}

func anthropicErrorBody(reqID string, e *apiError, details map[string]string) anthropicError {
	return anthropicError{Type: "error", Error: anthropicErrorDetail{Type: e.typ, Message: e.message, Details: details}, RequestID: reqID}
}

type anthropicCacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

type anthropicUsage struct {
	InputTokens              int64                   `json:"input_tokens"`
	CacheCreationInputTokens int64                   `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64                   `json:"cache_read_input_tokens"`
	CacheCreation            *anthropicCacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int64                   `json:"output_tokens"`
	ServiceTier              string                  `json:"service_tier,omitempty"`
}

// anthropicDeltaUsage is message_delta's usage: cumulative counts, without
// the cache_creation split or the tier.
type anthropicDeltaUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

func (a admission) anthropicDeltaUsage(out int64) anthropicDeltaUsage {
	return anthropicDeltaUsage{InputTokens: a.inputTokens, CacheCreationInputTokens: a.cacheCreate,
		CacheReadInputTokens: a.cacheRead, OutputTokens: out}
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessage struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []anthropicText `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        anthropicUsage  `json:"usage"`
}

// rateLimitMessage is the 429 text of §1.4 for dimension dim.
func rateLimitMessage(org string, limit int64, dim string) string {
	return fmt.Sprintf("This request would exceed the rate limit for your organization (%s) of %s %s per minute. "+
		"For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. "+
		"Please reduce the prompt length or the maximum tokens requested, or try again later. "+
		"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
		org, thousands(limit), dim)
}

// thousands formats n with comma separators: 50000 → "50,000".
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoAnthropic)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseAnthropic(body, true)
	if aerr == nil {
		req.fixedOutput, aerr = outputTokensHeader(r.Header, protoAnthropic)
	}
	if aerr != nil {
		x.rl = s.quotas.peekHeaders(scopeAnthropic, x.key, x.now)
		x.fail(aerr, nil)
		return
	}
	f := s.faults.decide(x.now)
	if f.kind != faultNone {
		x.rl = s.quotas.peekHeaders(scopeAnthropic, x.key, x.now)
		x.sendFault(f)
		return
	}
	a := s.quotas.admitAnthropic(x.key, req, x.now)
	x.rl = a.header
	if !a.ok {
		x.fail(&apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error",
			message: rateLimitMessage(s.cfg.OrgID, a.limit, a.dim)},
			http.Header{"Retry-After": {retryAfterSeconds(a.wait)}})
		return
	}
	t := s.stats.admit(x.key, x.now, admitted{endpoint: EndpointMessages, tier: anthropicTier,
		cache: CacheCounts{PromptTokens: req.inputTokens, ReadTokens: a.cacheRead, WriteTokens: a.cacheCreate,
			Write5mTokens: a.cache5m, Write1hTokens: a.cache1h}})
	n := req.replyLength(s.cfg.OutputTokens, s.cfg.Seed, 0)
	var produced int64
	if req.stream {
		produced = x.streamAnthropic(req, a, n, f)
	} else {
		produced = x.replyAnthropic(req, a, n, f)
	}
	if s.quotas.realtime {
		if !req.stream {
			s.quotas.chargeOutput(scopeAnthropic, x.key, produced, s.clock.Now())
		}
	} else {
		s.quotas.chargeOutput(scopeAnthropic, x.key, produced-a.reserved, s.clock.Now())
	}
	t.finish(Counts{Requests: 1, InputTokens: a.inCharged, OutputTokens: produced, Tokens: a.inCharged + produced})
}

func stopReason(n, maxTokens int64) *string {
	r := "end_turn"
	if n >= maxTokens {
		r = "max_tokens"
	}
	return &r
}

// anthropicTier is the service tier the mock serves Anthropic requests in:
// it has no Priority Tier capacity, so "auto" and "standard_only" both get
// standard.
const anthropicTier = "standard"

// anthropicUsage is the usage object of a reply with out output tokens:
// input_tokens is the uncached remainder, and cache_creation splits the
// writes by TTL.
func (a admission) anthropicUsage(out int64) anthropicUsage {
	return anthropicUsage{InputTokens: a.inputTokens, CacheCreationInputTokens: a.cacheCreate,
		CacheReadInputTokens: a.cacheRead, OutputTokens: out,
		CacheCreation: &anthropicCacheCreation{Ephemeral5m: a.cache5m, Ephemeral1h: a.cache1h},
		ServiceTier:   anthropicTier}
}

// replyAnthropic answers a non-streaming request; it returns the output
// tokens produced (0 when the client went away first).
func (x *exchange) replyAnthropic(req request, a admission, n int64, f fault) int64 {
	cfg := x.s.cfg
	if !x.sleep(cfg.TTFT + f.slow + time.Duration(max(0, n-1))*cfg.PerToken) {
		x.s.stats.status(x.key, 499)
		return 0
	}
	text := strings.Join(words(cfg.Seed, req.bodyHash, 0, n), "")
	u := a.anthropicUsage(n)
	msg := anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: req.model,
		Content: []anthropicText{{Type: "text", Text: text}}, StopReason: stopReason(n, req.maxTokens), Usage: u}
	x.commonHeaders("application/json")
	writeJSON(x.w, http.StatusOK, msg)
	x.s.stats.status(x.key, http.StatusOK)
	return n
}

// sse writes one named event.
func sse(w http.ResponseWriter, event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		b = []byte(`{"type":"error","error":{"type":"api_error","message":"encoding event"}}`)
	}
	_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	flush(w)
}

// streamAnthropic answers with the §1.6 event sequence; it returns the
// output tokens produced.
func (x *exchange) streamAnthropic(req request, a admission, n int64, f fault) int64 {
	cfg := x.s.cfg
	x.commonHeaders("text/event-stream; charset=utf-8")
	x.w.Header().Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.s.stats.status(x.key, http.StatusOK)
	start := anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: req.model,
		Content: []anthropicText{}, Usage: a.anthropicUsage(1)}
	sse(x.w, "message_start", map[string]any{"type": "message_start", "message": start})
	sse(x.w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": anthropicText{Type: "text", Text: ""}})
	sse(x.w, "ping", map[string]string{"type": "ping"})
	var produced int64
	for i, wd := range words(cfg.Seed, req.bodyHash, 0, n) {
		if int64(i) == int64(f.streamErrorAfter) {
			sse(x.w, "error", map[string]any{"type": "error",
				"error": map[string]string{"type": "overloaded_error", "message": "Overloaded"}})
			return produced
		}
		d := cfg.PerToken
		if i == 0 {
			d = cfg.TTFT + f.slow
		}
		if !x.sleep(d) {
			return produced
		}
		sse(x.w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "text_delta", "text": wd}})
		produced++
		if x.s.quotas.realtime {
			x.s.quotas.chargeOutput(scopeAnthropic, x.key, 1, x.s.clock.Now())
		}
	}
	if int64(f.streamErrorAfter) >= n && f.streamErrorAfter >= 0 {
		sse(x.w, "error", map[string]any{"type": "error",
			"error": map[string]string{"type": "overloaded_error", "message": "Overloaded"}})
		return produced
	}
	sse(x.w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(x.w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason(n, req.maxTokens), "stop_sequence": nil},
		"usage": a.anthropicDeltaUsage(produced)})
	sse(x.w, "message_stop", map[string]string{"type": "message_stop"})
	return produced
}
