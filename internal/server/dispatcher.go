package server

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/llm"
)

// dispatchConfig maps one upstream's config onto the dispatcher's. Zero
// fields stay zero so the dispatcher's own defaults apply.
func dispatchConfig(uc UpstreamConfig, o options, obs dispatch.Observer) dispatch.Config {
	cfg := dispatch.Config{
		Name:     uc.Name,
		Protocol: uc.Protocol,
		BaseURL:  uc.BaseURL,
		APIKey:   uc.APIKey,
		Limits: dispatch.Limits{
			RequestsPerMinute:     uc.Limits.RequestsPerMinute,
			InputTokensPerMinute:  uc.Limits.InputTokensPerMinute,
			OutputTokensPerMinute: uc.Limits.OutputTokensPerMinute,
			TokensPerMinute:       uc.Limits.TokensPerMinute,
			MaxConcurrency:        uc.Limits.MaxConcurrency,
		},
		BurstSeconds:    uc.BurstSeconds,
		SafetyMargin:    uc.SafetyMargin,
		JitterAllowance: uc.JitterAllowance,
		MinConcurrency:  uc.MinConcurrency,
		Retry: dispatch.RetryConfig{
			BaseDelay:   uc.Retry.BaseDelay,
			MaxDelay:    uc.Retry.MaxDelay,
			MaxAttempts: uc.Retry.MaxAttempts,
			BudgetRatio: uc.Retry.BudgetRatio,
			BudgetMin:   uc.Retry.BudgetMin,
		},
		Breaker: dispatch.BreakerConfig{
			Window:              uc.Breaker.Window,
			MinRequests:         uc.Breaker.MinRequests,
			FailureRatio:        uc.Breaker.FailureRatio,
			ConsecutiveFailures: uc.Breaker.ConsecutiveFailures,
			OpenTimeout:         uc.Breaker.OpenTimeout,
			HalfOpenProbes:      uc.Breaker.HalfOpenProbes,
		},
		HTTPClient: &http.Client{Transport: withHeaderTimeout(o.transport, uc.RequestTimeout)},
		Clock:      o.clock,
		Observer:   obs,
	}
	for name, cc := range uc.Classes {
		p, err := llm.ParsePriority(name)
		if err != nil { // validated; unknown names cannot reach here
			continue
		}
		cfg.Weights[p] = cc.Weight
		cfg.MaxWait[p] = cc.MaxWait
		cfg.Headroom[p] = cc.Headroom
	}
	return cfg
}

// newDispatcher builds the real engine for one upstream.
func newDispatcher(uc UpstreamConfig, o options, obs dispatch.Observer) (engine, error) {
	return dispatch.New(dispatchConfig(uc, o, obs))
}

// withHeaderTimeout applies request_timeout as the transport's response
// header timeout when the transport is an *http.Transport (a stream may
// then take as long as it needs); other transports are used as they are.
func withHeaderTimeout(rt http.RoundTripper, d time.Duration) http.RoundTripper {
	t, ok := rt.(*http.Transport)
	if !ok || d <= 0 {
		return rt
	}
	t = t.Clone()
	t.ResponseHeaderTimeout = d
	return t
}
