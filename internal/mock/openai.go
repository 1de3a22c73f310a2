package mock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// OpenAI Chat Completions wire shapes (spec §2.3–2.5), written by the mock
// itself.

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func openAIErrorBody(e *apiError) openAIError {
	return openAIError{Error: openAIErrorDetail{Message: e.message, Type: e.typ, Param: nullable(e.param), Code: nullable(e.code)}}
}

type openAIUsage struct {
	PromptTokens            int64            `json:"prompt_tokens"`
	CompletionTokens        int64            `json:"completion_tokens"`
	TotalTokens             int64            `json:"total_tokens"`
	PromptTokensDetails     map[string]int64 `json:"prompt_tokens_details"`
	CompletionTokensDetails map[string]int64 `json:"completion_tokens_details"`
}

// newOpenAIUsage is a chat completion's usage: prompt tokens include the
// cached ones.
func newOpenAIUsage(prompt, cached, completion int64) *openAIUsage {
	return &openAIUsage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		PromptTokensDetails: map[string]int64{"cached_tokens": cached, "audio_tokens": 0},
		CompletionTokensDetails: map[string]int64{"reasoning_tokens": 0, "audio_tokens": 0,
			"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
}

type openAIMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type openAIChoice struct {
	Index        int             `json:"index"`
	Message      openAIMessage   `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type openAICompletion struct {
	ID                string         `json:"id"`
	Object            string         `json:"object"`
	Created           int64          `json:"created"`
	Model             string         `json:"model"`
	SystemFingerprint string         `json:"system_fingerprint"`
	ServiceTier       string         `json:"service_tier"`
	Choices           []openAIChoice `json:"choices"`
	Usage             *openAIUsage   `json:"usage"`
}

type openAIDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type openAIChunkChoice struct {
	Index        int             `json:"index"`
	Delta        openAIDelta     `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type openAIChunk struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"`
	Created           int64               `json:"created"`
	Model             string              `json:"model"`
	ServiceTier       string              `json:"service_tier"`
	SystemFingerprint string              `json:"system_fingerprint"`
	Choices           []openAIChunkChoice `json:"choices"`
	// Usage is null on every chunk but the last when include_usage is set,
	// and absent otherwise.
	Usage json.RawMessage `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

const systemFingerprint = "fp_5106c0a1"

func openAIRateMessage(model, org string, a admission) string {
	if a.tooLarge {
		return fmt.Sprintf("Request too large for %s in organization %s on tokens per min (TPM): Limit %d, Requested %d. "+
			"The input or output tokens must be reduced in order to run successfully. "+
			"Visit https://platform.openai.com/account/rate-limits to learn more.", model, org, a.limit, a.need)
	}
	unit := "TPM"
	if a.dim == "requests" {
		unit = "RPM"
	}
	return fmt.Sprintf("Rate limit reached for %s in organization %s on %s per min (%s): Limit %d, Used %d, Requested %d. "+
		"Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		model, org, a.dim, unit, a.limit, a.used, a.need, a.wait.Round(time.Millisecond))
}

func finishReason(n, maxTokens int64) string {
	if n >= maxTokens {
		return "length"
	}
	return "stop"
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseOpenAI(body, s.cfg.DefaultMaxTokens)
	if aerr == nil {
		req.fixedOutput, aerr = outputTokensHeader(r.Header, protoOpenAI)
	}
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
	a, ok := x.admitOpenAI(req, true)
	if !ok {
		return
	}
	t := s.stats.admit(x.key, x.now, admitted{endpoint: EndpointChat, tier: tier,
		cache: CacheCounts{PromptTokens: req.inputTokens, ReadTokens: a.cacheRead}})
	lens := make([]int64, req.n)
	for i := range lens {
		lens[i] = req.replyLength(s.cfg.OutputTokens, s.cfg.Seed, i)
	}
	var produced int64
	if req.stream {
		produced = x.streamOpenAI(req, a, tier, lens, f)
	} else {
		produced = x.replyOpenAI(req, a, tier, lens, f)
	}
	s.quotas.chargeOutput(scopeOpenAI, x.key, produced-a.reserved, s.clock.Now())
	t.finish(Counts{Requests: 1, InputTokens: req.inputTokens, OutputTokens: produced, Tokens: req.inputTokens + produced})
}

// admitOpenAI admits req on the key's OpenAI buckets (with its prompt
// cache when cache is set); false means the 429 was sent.
func (x *exchange) admitOpenAI(req request, cache bool) (admission, bool) {
	a := x.s.quotas.admitOpenAI(x.key, req, cache, x.now)
	x.rl = a.header
	if a.ok {
		return a, true
	}
	e := &apiError{status: http.StatusTooManyRequests, typ: a.dim, code: "rate_limit_exceeded",
		message: openAIRateMessage(req.model, openAIOrg(x.s.cfg.OrgID), a)}
	var extra http.Header
	if !a.tooLarge {
		extra = http.Header{"Retry-After": {retryAfterSeconds(a.wait)}}
	}
	x.fail(e, extra)
	return a, false
}

func (x *exchange) replyOpenAI(req request, a admission, tier string, lens []int64, f fault) int64 {
	cfg := x.s.cfg
	ttft, per := x.s.pace(tier)
	var total, longest int64
	for _, n := range lens {
		total += n
		longest = max(longest, n)
	}
	if !x.sleep(ttft + f.slow + time.Duration(max(0, longest-1))*per) {
		x.s.stats.status(x.key, 499)
		return 0
	}
	c := openAICompletion{ID: newID("chatcmpl-"), Object: "chat.completion", Created: x.now.Unix(), Model: req.model,
		SystemFingerprint: systemFingerprint, ServiceTier: tier, Usage: newOpenAIUsage(req.inputTokens, a.cacheRead, total)}
	for i, n := range lens {
		c.Choices = append(c.Choices, openAIChoice{Index: i, Logprobs: jsonNull, FinishReason: finishReason(n, req.maxTokens),
			Message: openAIMessage{Role: "assistant", Content: strings.Join(words(cfg.Seed, req.bodyHash, i, n), "")}})
	}
	x.commonHeaders("application/json")
	writeJSON(x.w, http.StatusOK, c)
	x.s.stats.status(x.key, http.StatusOK)
	return total
}

// streamOpenAI answers with the §2.5 chunk sequence, one choice after the
// other; it returns the output tokens produced.
func (x *exchange) streamOpenAI(req request, a admission, tier string, lens []int64, f fault) int64 {
	cfg := x.s.cfg
	ttft, per := x.s.pace(tier)
	x.commonHeaders("text/event-stream; charset=utf-8")
	x.w.Header().Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.s.stats.status(x.key, http.StatusOK)
	id := newID("chatcmpl-")
	var usage json.RawMessage
	if req.includeUsage {
		usage = jsonNull
	}
	send := func(choices []openAIChunkChoice, u json.RawMessage) {
		b, _ := json.Marshal(openAIChunk{ID: id, Object: "chat.completion.chunk", Created: x.now.Unix(), Model: req.model,
			ServiceTier: tier, SystemFingerprint: systemFingerprint, Choices: choices, Usage: u})
		_, _ = fmt.Fprintf(x.w, "data: %s\n\n", b)
		flush(x.w)
	}
	var produced int64
	deltas := 0
	for i, n := range lens {
		empty := ""
		send([]openAIChunkChoice{{Index: i, Delta: openAIDelta{Role: "assistant", Content: &empty}, Logprobs: jsonNull}}, usage)
		for j, wd := range words(cfg.Seed, req.bodyHash, i, n) {
			if deltas == f.streamErrorAfter {
				x.streamError()
				return produced
			}
			d := per
			if i == 0 && j == 0 {
				d = ttft + f.slow
			}
			if !x.sleep(d) {
				return produced
			}
			send([]openAIChunkChoice{{Index: i, Delta: openAIDelta{Content: &wd}, Logprobs: jsonNull}}, usage)
			produced++
			deltas++
		}
		fr := finishReason(n, req.maxTokens)
		send([]openAIChunkChoice{{Index: i, Delta: openAIDelta{}, Logprobs: jsonNull, FinishReason: &fr}}, usage)
	}
	if f.streamErrorAfter >= 0 && deltas <= f.streamErrorAfter {
		x.streamError()
		return produced
	}
	if req.includeUsage {
		u, _ := json.Marshal(newOpenAIUsage(req.inputTokens, a.cacheRead, produced))
		send([]openAIChunkChoice{}, u)
	}
	_, _ = fmt.Fprint(x.w, "data: [DONE]\n\n")
	flush(x.w)
	return produced
}

func (x *exchange) streamError() {
	b, _ := json.Marshal(openAIErrorBody(&apiError{typ: "server_error",
		message: "The server is currently overloaded with other requests. Sorry about that! You can retry your request."}))
	_, _ = fmt.Fprintf(x.w, "data: %s\n\n", b)
	flush(x.w)
}

// openAIOrg renders the organization id OpenAI-style: "org-" and up to 24
// characters of OrgID without dashes (kept as is when it already starts
// with "org-").
func openAIOrg(id string) string {
	if strings.HasPrefix(id, "org-") {
		return id
	}
	s := strings.ReplaceAll(id, "-", "")
	return "org-" + s[:min(24, len(s))]
}
