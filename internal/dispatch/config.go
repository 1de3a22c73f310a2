package dispatch

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// Config defaults not already defined by package flow.
const (
	// MaxAttemptsDefault is how many upstream calls a request may make:
	// every call that reaches the provider counts, a rate limit and a
	// half-open probe included.
	MaxAttemptsDefault = 4
	// BudgetRatioDefault is the share of recent requests that may be
	// retries.
	BudgetRatioDefault = flow.BudgetRatioDefault
	// BudgetMinDefault is the retries per second always allowed.
	BudgetMinDefault = flow.BudgetMinDefault
	// MaxConcurrencyDefault caps requests in flight.
	MaxConcurrencyDefault = flow.MaxConcurrencyDefault
	// SlowDownFactor is the share of its current refill rate an upstream
	// keeps after an OpenAI 503 "Slow Down" (spec §2.3, §8.1).
	SlowDownFactor = 0.5
	// SlowDownRamp is how long the rate then takes to ramp back to the
	// limit: OpenAI asks for a steady rate for 15+ minutes before growing.
	SlowDownRamp = 15 * time.Minute
	// HeadroomWindowDefault is how long a more urgent class's last request
	// keeps the lower classes' headroom in force.
	HeadroomWindowDefault = time.Minute
	// MinConcurrencyDefault is the adaptive concurrency floor.
	MinConcurrencyDefault = flow.MinConcurrencyDefault
	// BurstSecondsDefault is the initial bucket depth in seconds of refill.
	BurstSecondsDefault = flow.BurstSecondsDefault
	// SafetyMarginDefault is the share of each limit used.
	SafetyMarginDefault = flow.SafetyMarginDefault
	// BaseDelayDefault is the first retry's backoff ceiling.
	BaseDelayDefault = flow.BaseDelayDefault
	// MaxDelayDefault caps backoff.
	MaxDelayDefault = flow.MaxDelayDefault
	// UsageBufferDefault is how much of a non-streamed body is kept to read
	// its usage from.
	UsageBufferDefault = 4 << 20
	// MaxClientRetryAfter caps the retry-after Sluice suggests to clients:
	// the SDKs honour short hints (openai-go caps at 8 s), and the queue
	// absorbs longer waits better than a client retry loop.
	MaxClientRetryAfter = 8 * time.Second
)

// Limits are an upstream's provider quotas, per minute. Zero means unknown:
// learned from the provider's rate-limit headers.
type Limits struct {
	// RequestsPerMinute is RPM. Defaults to 0 (learned).
	RequestsPerMinute int64
	// InputTokensPerMinute is ITPM. Defaults to 0 (learned).
	InputTokensPerMinute int64
	// OutputTokensPerMinute is OTPM. Defaults to 0 (learned).
	OutputTokensPerMinute int64
	// TokensPerMinute is combined TPM. Defaults to 0 (learned).
	TokensPerMinute int64
	// MaxConcurrency caps requests in flight. Defaults to
	// MaxConcurrencyDefault.
	MaxConcurrency int
}

// RetryConfig governs retries of overload and transient failures.
type RetryConfig struct {
	// BaseDelay is the first retry's full-jitter ceiling. Defaults to
	// BaseDelayDefault.
	BaseDelay time.Duration
	// MaxDelay caps the backoff ceiling. Defaults to MaxDelayDefault.
	MaxDelay time.Duration
	// MaxAttempts bounds the upstream calls of one request: every call that
	// reaches the provider counts, a rate limit and a half-open breaker
	// probe included. Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// BudgetRatio is the share of recent requests that may be retries.
	// Defaults to BudgetRatioDefault.
	BudgetRatio float64
	// BudgetMin is the retries per second always allowed. Defaults to
	// BudgetMinDefault.
	BudgetMin float64
}

// BreakerConfig configures the upstream's circuit breaker; see
// flow.BreakerConfig for its fields and defaults.
type BreakerConfig = flow.BreakerConfig

// Config configures one upstream's Dispatcher.
type Config struct {
	// Name names the upstream in errors and metrics. Required.
	Name string
	// Protocol is the upstream's wire protocol. Required.
	Protocol llm.Protocol
	// BaseURL is the upstream's base URL, e.g. https://api.anthropic.com;
	// the request's Path is appended. Required.
	BaseURL string
	// APIKey is sent upstream (Anthropic x-api-key, OpenAI Authorization:
	// Bearer). Defaults to none: no credential is sent.
	APIKey string
	// Limits are the provider quotas. Defaults to all learned.
	Limits Limits
	// BurstSeconds is the initial bucket depth in seconds of refill.
	// Defaults to BurstSecondsDefault.
	BurstSeconds float64
	// SafetyMargin is the share of each limit used, in (0, 1]. Defaults to
	// SafetyMarginDefault.
	SafetyMargin float64
	// JitterAllowance is the uneven delivery delay the quota buckets leave
	// room for (flow.LimiterConfig.JitterAllowance). Defaults to
	// flow.JitterAllowanceDefault; negative means none.
	JitterAllowance time.Duration
	// Weights are the WFQ weights per class (critical first). Defaults to
	// flow.WeightsDefault (8/4/2/1).
	Weights [llm.NumPriorities]float64
	// MaxWait is each class's aging bound and default deadline. Defaults to
	// flow.MaxWaitDefault (30s, 1m, 5m, 30m).
	MaxWait [llm.NumPriorities]time.Duration
	// Headroom is, per class, the share of each quota bucket's depth a
	// request must leave unused, so more urgent classes find room at once
	// under saturation; a negative value means none. Defaults to
	// flow.HeadroomDefault (0, 10%, 20%, 20%).
	Headroom [llm.NumPriorities]float64
	// HeadroomWindow is how recently a more urgent class must have sent a
	// request for a class's headroom to apply: traffic of one class alone
	// uses the whole bucket. Defaults to HeadroomWindowDefault.
	HeadroomWindow time.Duration
	// Retry governs retries. Defaults to RetryConfig's defaults.
	Retry RetryConfig
	// Breaker configures the circuit breaker. Defaults to flow's defaults.
	Breaker BreakerConfig
	// MinConcurrency is the adaptive concurrency floor. Defaults to
	// MinConcurrencyDefault, or Limits.MaxConcurrency when that is lower.
	MinConcurrency int
	// HTTPClient sends upstream requests. Defaults to a client with
	// http.DefaultTransport and no overall timeout (streams may be long).
	HTTPClient *http.Client
	// Clock is the time source. Defaults to clock.Real().
	Clock clock.Clock
	// Observer receives engine events. Defaults to NopObserver.
	Observer Observer
	// Rand jitters backoff and breaker periods; it is used under a lock.
	// Defaults to a randomly seeded source.
	Rand *rand.Rand
}

// WithDefaults returns c with every zero field set to its default. It is
// pure: c is not modified.
func (c Config) WithDefaults() Config {
	c.BurstSeconds = cmp.Or(c.BurstSeconds, BurstSecondsDefault)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, SafetyMarginDefault)
	for i := range c.Weights {
		c.Weights[i] = cmp.Or(c.Weights[i], flow.WeightsDefault[i])
		c.MaxWait[i] = cmp.Or(c.MaxWait[i], flow.MaxWaitDefault[i])
		c.Headroom[i] = max(cmp.Or(c.Headroom[i], flow.HeadroomDefault[i]), 0)
	}
	c.HeadroomWindow = cmp.Or(c.HeadroomWindow, HeadroomWindowDefault)
	c.Limits.MaxConcurrency = cmp.Or(c.Limits.MaxConcurrency, MaxConcurrencyDefault)
	c.MinConcurrency = cmp.Or(c.MinConcurrency, min(MinConcurrencyDefault, c.Limits.MaxConcurrency))
	c.Retry.BaseDelay = cmp.Or(c.Retry.BaseDelay, BaseDelayDefault)
	c.Retry.MaxDelay = cmp.Or(c.Retry.MaxDelay, max(MaxDelayDefault, c.Retry.BaseDelay))
	c.Retry.MaxAttempts = cmp.Or(c.Retry.MaxAttempts, MaxAttemptsDefault)
	c.Retry.BudgetRatio = cmp.Or(c.Retry.BudgetRatio, BudgetRatioDefault)
	c.Retry.BudgetMin = cmp.Or(c.Retry.BudgetMin, BudgetMinDefault)
	c.Breaker = c.Breaker.WithDefaults()
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: http.DefaultTransport}
	}
	c.Clock = clock.Or(c.Clock)
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return c
}

// validate reports the first invalid field, by name.
func (c Config) validate() error {
	if c.Name == "" {
		return errors.New("Name is required")
	}
	if _, err := llm.ParseProtocol(string(c.Protocol)); err != nil {
		return fmt.Errorf("Protocol: %w", err)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("BaseURL must be an absolute http(s) URL, got %q", c.BaseURL)
	}
	for name, v := range map[string]int64{
		"Limits.RequestsPerMinute":     c.Limits.RequestsPerMinute,
		"Limits.InputTokensPerMinute":  c.Limits.InputTokensPerMinute,
		"Limits.OutputTokensPerMinute": c.Limits.OutputTokensPerMinute,
		"Limits.TokensPerMinute":       c.Limits.TokensPerMinute,
	} {
		if v < 0 {
			return fmt.Errorf("%s must be >= 0, got %d", name, v)
		}
	}
	switch {
	case c.Limits.MaxConcurrency < 1:
		return fmt.Errorf("Limits.MaxConcurrency must be >= 1, got %d", c.Limits.MaxConcurrency)
	case c.MinConcurrency < 1 || c.MinConcurrency > c.Limits.MaxConcurrency:
		return fmt.Errorf("MinConcurrency must be in [1, Limits.MaxConcurrency=%d], got %d", c.Limits.MaxConcurrency, c.MinConcurrency)
	case c.JitterAllowance > time.Minute:
		return fmt.Errorf("JitterAllowance must be at most 1m, got %v", c.JitterAllowance)
	case !(c.BurstSeconds > 0 && c.BurstSeconds <= 60):
		return fmt.Errorf("BurstSeconds must be in (0, 60], got %v", c.BurstSeconds)
	case !(c.SafetyMargin > 0 && c.SafetyMargin <= 1):
		return fmt.Errorf("SafetyMargin must be in (0, 1], got %v", c.SafetyMargin)
	case c.Retry.BaseDelay <= 0:
		return fmt.Errorf("Retry.BaseDelay must be > 0, got %v", c.Retry.BaseDelay)
	case c.Retry.MaxDelay < c.Retry.BaseDelay:
		return fmt.Errorf("Retry.MaxDelay (%v) must be >= Retry.BaseDelay (%v)", c.Retry.MaxDelay, c.Retry.BaseDelay)
	case c.Retry.MaxAttempts < 1:
		return fmt.Errorf("Retry.MaxAttempts must be >= 1, got %d", c.Retry.MaxAttempts)
	case c.Retry.BudgetRatio < 0:
		return fmt.Errorf("Retry.BudgetRatio must be >= 0, got %v", c.Retry.BudgetRatio)
	case c.Retry.BudgetMin < 0:
		return fmt.Errorf("Retry.BudgetMin must be >= 0, got %v", c.Retry.BudgetMin)
	}
	for i := range c.Weights {
		if !(c.Weights[i] > 0) {
			return fmt.Errorf("Weights[%s] must be > 0, got %v", llm.Priority(i), c.Weights[i])
		}
		if c.MaxWait[i] <= 0 {
			return fmt.Errorf("MaxWait[%s] must be > 0, got %v", llm.Priority(i), c.MaxWait[i])
		}
		if c.HeadroomWindow < 0 {
			return fmt.Errorf("HeadroomWindow must be >= 0, got %v", c.HeadroomWindow)
		}
		if !(c.Headroom[i] >= 0 && c.Headroom[i] < 1) {
			return fmt.Errorf("Headroom[%s] must be in [0, 1), got %v", llm.Priority(i), c.Headroom[i])
		}
	}
	if err := c.Breaker.Validate(); err != nil {
		return err
	}
	return nil
}

func (c Config) limiterConfig() flow.LimiterConfig {
	return flow.LimiterConfig{
		Limits: [flow.NumDims]float64{
			flow.Requests:     float64(c.Limits.RequestsPerMinute),
			flow.InputTokens:  float64(c.Limits.InputTokensPerMinute),
			flow.OutputTokens: float64(c.Limits.OutputTokensPerMinute),
			flow.Tokens:       float64(c.Limits.TokensPerMinute),
		},
		BurstSeconds:    c.BurstSeconds,
		SafetyMargin:    c.SafetyMargin,
		JitterAllowance: c.JitterAllowance,
	}
}
