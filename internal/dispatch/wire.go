package dispatch

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// errorBodyLimit bounds how much of an upstream error body is read.
const errorBodyLimit = 1 << 20

func errorTypeFor(p llm.Protocol, status int) string { return provider.ErrorTypeFor(p, status) }

var dimOf = map[provider.Dimension]flow.Dim{
	provider.DimRequests:     flow.Requests,
	provider.DimInputTokens:  flow.InputTokens,
	provider.DimOutputTokens: flow.OutputTokens,
	provider.DimTokens:       flow.Tokens,
}

// observations converts the provider's rate-limit snapshot for the
// limiter.
func observations(p llm.Protocol, rl provider.RateLimits) map[flow.Dim]flow.Observation {
	if len(rl) == 0 {
		return nil
	}
	obs := make(map[flow.Dim]flow.Observation, len(rl))
	for dim, b := range rl {
		d, ok := dimOf[dim]
		if !ok {
			continue
		}
		o := flow.Observation{Limit: float64(b.Limit), Remaining: float64(b.Remaining), Reset: b.Reset}
		if p == llm.Anthropic && d != flow.Requests {
			// Anthropic rounds token remaining to the nearest thousand.
			o.Precision = AnthropicRemainingRounding / 2
		}
		obs[d] = o
	}
	return obs
}

// actualAmount is what a response's usage takes from each dimension, as
// the provider counts it (provider.RateLimitedInputTokens): for Anthropic,
// input counts input + cache creation, and cache reads only for the
// models whose ITPM counts them; for OpenAI, prompt tokens as reported.
func actualAmount(p llm.Protocol, model string, u llm.Usage) flow.Amount {
	return flow.NewAmount(provider.RateLimitedInputTokens(p, model, u), u.OutputTokens)
}

// promptAmount is the whole prompt a response's usage reports, cached or
// not: what the estimate of its input is calibrated against (a cache read
// is still the prompt's size).
func promptAmount(p llm.Protocol, u llm.Usage) flow.Amount {
	in := u.InputTokens
	if p == llm.Anthropic {
		in += u.CacheCreationInputTokens + u.CacheReadInputTokens
	}
	return flow.NewAmount(in, u.OutputTokens)
}

// tokensOnly is a without the request itself: what an attempt that reached
// the provider but produced nothing gives back.
func tokensOnly(a flow.Amount) flow.Amount {
	a[flow.Requests] = 0
	return a
}

// statusForGiveUp is the status Sluice answers with after an outcome that
// had no usable HTTP status (transport errors, stream failures).
func statusForGiveUp(o *llm.Outcome) int {
	switch {
	case o == nil:
		return http.StatusServiceUnavailable
	case o.Status >= 400:
		return o.Status
	case o.ErrorType == "timeout" || o.ErrorType == "timeout_error":
		return http.StatusGatewayTimeout
	case o.ErrorType == "overloaded_error" || o.Kind == llm.Overload:
		return 529
	}
	return http.StatusBadGateway
}

func since(start, now time.Time) time.Duration { return max(now.Sub(start), 0) }
