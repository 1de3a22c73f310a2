package mock

import (
	"net/http"
	"time"
)

// Service tiers. Anthropic: the mock has no Priority Tier capacity, so
// every request is served "standard" (anthropicTier). OpenAI: the response
// reports the tier that served the request ("may be different from the
// value set in the parameter"): "auto" and an absent service_tier are
// served "default", "fast" is reported "priority"; "default", "flex",
// "scale" and "priority" as asked.
// Flex is slower (Config.FlexLatencyFactor) and may answer 429
// resource_unavailable (Faults.FlexUnavailableRate), which is not charged.

const (
	tierDefault = "default"
	tierFlex    = "flex"
)

// openAIServedTier is the tier that serves a request asking for asked.
func openAIServedTier(asked string) string {
	switch asked {
	case "", "auto":
		return tierDefault
	case "fast":
		return "priority"
	}
	return asked
}

// pace is the latency of a reply in tier: the time to the first token and
// per further token.
func (s *Server) pace(tier string) (ttft, perToken time.Duration) {
	ttft, perToken = s.cfg.TTFT, s.cfg.PerToken
	if tier == tierFlex {
		f := s.cfg.FlexLatencyFactor
		ttft, perToken = time.Duration(float64(ttft)*f), time.Duration(float64(perToken)*f)
	}
	return ttft, perToken
}

// flexUnavailable answers a flex request that finds no capacity; false
// when it found some (or is not flex).
func (x *exchange) flexUnavailable(tier string) bool {
	if tier != tierFlex || !x.s.faults.flexUnavailable() {
		return false
	}
	x.rl = x.s.quotas.peekHeaders(scopeOpenAI, x.key, x.now)
	x.fail(&apiError{status: http.StatusTooManyRequests, typ: "resource_unavailable", code: "resource_unavailable",
		message: "Flex processing is temporarily unavailable: there is not enough capacity to serve this request. " +
			"You have not been charged. Retry later, or use service_tier 'default'."}, nil)
	return true
}
