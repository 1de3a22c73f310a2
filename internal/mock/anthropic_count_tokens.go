package mock

import "net/http"

// POST /v1/messages/count_tokens: the input tokens the messages endpoint
// would charge for the same body (input + cache reads + cache writes: the
// same prompt, counted the same way; token counting "provides an estimate
// without using caching logic"), in its own per-key request bucket
// (Limits.CountTokensRPM) with its own rate-limit headers. A 429 here takes
// nothing from the messages buckets, and messages traffic takes nothing
// from this one.

func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	x := s.exchange(w, r, protoAnthropic)
	if !x.auth() || x.refused() {
		return
	}
	body := x.body()
	if body == nil {
		return
	}
	req, aerr := parseAnthropic(body, false)
	if aerr != nil {
		x.rl = s.quotas.peekHeaders(scopeCountTokens, x.key, x.now)
		x.fail(aerr, nil)
		return
	}
	if f := s.faults.decide(x.now); f.kind != faultNone {
		x.rl = s.quotas.peekHeaders(scopeCountTokens, x.key, x.now)
		x.sendFault(f)
		return
	}
	a := s.quotas.admitCountTokens(scopeCountTokens, x.key, x.now)
	x.rl = a.header
	if !a.ok {
		x.fail(&apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error",
			message: rateLimitMessage(s.cfg.OrgID, a.limit, a.dim)},
			http.Header{"Retry-After": {retryAfterSeconds(a.wait)}})
		return
	}
	s.stats.endpoint(x.key, EndpointCountTokens)
	x.commonHeaders("application/json")
	writeJSON(w, http.StatusOK, map[string]int64{"input_tokens": req.inputTokens})
	s.stats.status(x.key, http.StatusOK)
}
