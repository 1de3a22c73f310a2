package mock

import "net/http"

// POST /v1/responses/input_tokens: the input tokens a Responses create of
// the same body would be charged (tools, instructions, the previous turn
// when previous_response_id names one of the key's responses, and the
// input: the same prompt, counted the same way), answered as
// {"object":"response.input_tokens","input_tokens":N}. It has its own
// per-key request bucket (Limits.CountTokensRPM) with its own
// x-ratelimit-*-requests headers: a 429 here takes nothing from the
// Responses and chat buckets, and they take nothing from this one.

// inputTokenCount is the answer (the SDKs' InputTokenCountResponse).
type inputTokenCount struct {
	Object      string `json:"object"`
	InputTokens int64  `json:"input_tokens"`
}

func (s *Server) handleInputTokens(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoOpenAI)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseInputTokens(body, s.previousTurn(x.key, x.now))
	if aerr != nil {
		x.rl = s.quotas.peekHeaders(scopeInputTokens, x.key, x.now)
		x.fail(aerr, nil)
		return
	}
	if f := s.faults.decide(x.now); f.kind != faultNone {
		x.rl = s.quotas.peekHeaders(scopeInputTokens, x.key, x.now)
		x.sendFault(f)
		return
	}
	a := s.quotas.admitCountTokens(scopeInputTokens, x.key, x.now)
	x.rl = a.header
	if !a.ok {
		a.need = 1
		x.fail(&apiError{status: http.StatusTooManyRequests, typ: a.dim, code: "rate_limit_exceeded",
			message: openAIRateMessage(req.model, openAIOrg(s.cfg.OrgID), a)},
			http.Header{"Retry-After": {retryAfterSeconds(a.wait)}})
		return
	}
	s.stats.endpoint(x.key, EndpointInputTokens)
	x.replyJSON(inputTokenCount{Object: "response.input_tokens", InputTokens: req.inputTokens})
}
