package sluice

import (
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/upstream"
)

// Protocol names a provider wire protocol.
type Protocol string

// The supported protocols.
const (
	// Anthropic is the Messages API (POST /v1/messages).
	Anthropic Protocol = "anthropic"
	// OpenAI is the Chat Completions API (POST /v1/chat/completions), also
	// spoken by many OpenAI-compatible gateways.
	OpenAI Protocol = "openai"
)

// Profile presets an upstream's class, retry and wait settings in one
// word; docs/config.md has the table of what each sets. A profile fills
// only the fields left zero, so an explicitly set field always wins.
type Profile string

// The profiles.
const (
	// Balanced is the defaults: nothing beyond them is preset.
	Balanced Profile = "balanced"
	// Latency is for interactive traffic: short class waits, a larger
	// critical share, more headroom kept for urgent requests, and quick
	// retries that give up early.
	Latency Profile = "latency"
	// Throughput is for offline and batch traffic: long class waits and
	// patient retries, so work waits for quota instead of failing.
	Throughput Profile = "throughput"
)

// Upstream configures one provider endpoint: its protocol, URL, key,
// quotas, and the engine's tuning. It has the fields, defaults and YAML
// names of an entry of the gateway's upstreams: list (docs/config.md).
// A zero field takes the profile's value, else its default.
type Upstream struct {
	// Name names the upstream in errors and metrics. Required: 1-63
	// lower-case letters, digits, '-' and '_'. Defaults to none.
	Name string `yaml:"name"`
	// Protocol is the wire protocol, Anthropic or OpenAI. Required.
	// Defaults to none.
	Protocol Protocol `yaml:"protocol"`
	// BaseURL is the provider's root URL; the request's path is appended.
	// Defaults to https://api.anthropic.com or https://api.openai.com
	// after Protocol.
	BaseURL string `yaml:"base_url"`
	// APIKey is sent upstream as x-api-key (Anthropic) or Authorization:
	// Bearer (OpenAI), replacing whatever key the SDK sent. Defaults to
	// none: no credential is sent.
	APIKey string `yaml:"api_key"`
	// APIKeys is a pool of provider keys used instead of APIKey: each key
	// has its own quota buckets, 429 pause and concurrency, and requests go
	// to the key with the most room (docs/pools.md). Defaults to none:
	// APIKey alone is a pool of one.
	APIKeys []Key `yaml:"api_keys"`
	// Orgs are account-level quotas shared by the keys naming the org
	// (Key.Org). Defaults to none: an org named by keys but not listed here
	// learns its limits from the provider's headers.
	Orgs map[string]Org `yaml:"orgs"`
	// KeyProbeInterval is how long a key taken out of the pool (revoked,
	// out of credit) waits before one request probes it again. Defaults to
	// 1m.
	KeyProbeInterval time.Duration `yaml:"key_probe_interval"`
	// Profile presets the class, retry and wait settings left zero.
	// Defaults to Balanced.
	Profile Profile `yaml:"profile"`
	// Limits are the provider quotas to stay under. Defaults to none
	// known (learned from the provider's rate-limit headers).
	Limits Limits `yaml:"limits"`
	// BurstSeconds is how many seconds of refill a full quota bucket
	// holds, in (0, 60]. Defaults to 5.
	BurstSeconds float64 `yaml:"burst_seconds"`
	// SafetyMargin is the share of each quota used, in (0, 1]. Defaults to
	// 0.98.
	SafetyMargin float64 `yaml:"safety_margin"`
	// MaxSafetyMargin is the share of each quota used while no provider
	// 429 is seen, in [SafetyMargin, 1]; after a 429 the margin drops to
	// SafetyMargin and narrows back over a minute. Defaults to 0.995 when
	// SafetyMargin is not set, else to SafetyMargin (fixed).
	MaxSafetyMargin float64 `yaml:"max_safety_margin"`
	// OutputReservation is what a request reserves against the output
	// quota before its usage is known: "max_tokens" (the default, for a
	// provider that reserves it too) or "learned" (a high quantile of
	// what requests to the same model used).
	OutputReservation string `yaml:"output_reservation"`
	// JitterAllowance keeps the quota buckets this much refill shallower
	// than the provider's burst, so requests delayed unevenly on their way
	// cannot reach it faster than it refills; negative turns it off; at
	// most 1m. Defaults to 100ms.
	JitterAllowance time.Duration `yaml:"jitter_allowance"`
	// MinConcurrency is the floor of the adaptive concurrency limit, at
	// most Limits.MaxConcurrency. Defaults to 4, or Limits.MaxConcurrency
	// when that is lower.
	MinConcurrency int `yaml:"min_concurrency"`
	// RequestTimeout bounds how long one attempt may wait for the
	// upstream's response headers (a stream then runs as long as it
	// needs); it applies to the default HTTP client only (see
	// WithHTTPClient). Defaults to 10m.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// HeadroomWindow is how recently a more urgent class must have sent a
	// request for a class's Headroom to apply. Defaults to 1m.
	HeadroomWindow time.Duration `yaml:"headroom_window"`
	// Retry shapes retries of overload and transient failures. Defaults to
	// the profile's, else Retry's defaults.
	Retry Retry `yaml:"retry"`
	// Breaker is the circuit breaker. Defaults to Breaker's defaults.
	Breaker Breaker `yaml:"breaker"`
	// Classes are the priority classes' scheduling settings. Defaults to
	// the profile's, else Class's defaults.
	Classes Classes `yaml:"classes"`
}

// Limits are an upstream's per-minute quotas and concurrency cap. A zero
// quota is unknown: learned from the provider's rate-limit headers.
type Limits struct {
	// RequestsPerMinute is the RPM quota. Defaults to 0 (learned).
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// InputTokensPerMinute is Anthropic's ITPM. Defaults to 0 (learned).
	InputTokensPerMinute int64 `yaml:"input_tokens_per_minute"`
	// OutputTokensPerMinute is Anthropic's OTPM. Defaults to 0 (learned).
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
	// TokensPerMinute is the combined TPM (OpenAI). Defaults to 0
	// (learned).
	TokensPerMinute int64 `yaml:"tokens_per_minute"`
	// MaxConcurrency caps requests in flight upstream. Defaults to 64.
	MaxConcurrency int `yaml:"max_concurrency"`
}

// Key is one provider key of a pool (Upstream.APIKeys).
type Key struct {
	// Key is the provider key. Required. Defaults to none.
	Key string `yaml:"key"`
	// Limits are this key's quotas; a zero field takes the upstream's
	// value. Defaults to the upstream's limits.
	Limits Limits `yaml:"limits"`
	// Org names the account the key belongs to: keys of one org share its
	// account-level bucket (Upstream.Orgs). Defaults to none: the key is
	// its own account.
	Org string `yaml:"org"`
}

// Org is an account whose quotas its keys share.
type Org struct {
	// Limits are the account-level quotas every key of the org draws from,
	// on top of its own. Defaults to none known (learned from the
	// provider's headers).
	Limits Limits `yaml:"limits"`
}

// Retry shapes retries of attempts that fail with an overload or
// transient error. Rate-limit answers are waited out and do not count.
type Retry struct {
	// BaseDelay is the first retry's full-jitter backoff ceiling. Defaults
	// to the profile's, else 500ms.
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the backoff ceiling, at least BaseDelay. Defaults to
	// the profile's, else 8s.
	MaxDelay time.Duration `yaml:"max_delay"`
	// MaxAttempts bounds the attempts that fail with overload or transient
	// errors (1 = no retry). Defaults to the profile's, else 4.
	MaxAttempts int `yaml:"max_attempts"`
	// BudgetRatio is the share of recent requests that may be retries, in
	// (0, 1]. Defaults to 0.2.
	BudgetRatio float64 `yaml:"budget_ratio"`
	// BudgetMin is the retries per second always allowed. Defaults to 3.
	BudgetMin float64 `yaml:"budget_min"`
}

// Breaker is an upstream's circuit breaker: it opens on FailureRatio (with
// MinRequests results in a Window) or ConsecutiveFailures, stays open for
// about OpenTimeout, then lets HalfOpenProbes through.
type Breaker struct {
	// Window is the closed-state counting interval. Defaults to 30s.
	Window time.Duration `yaml:"window"`
	// MinRequests is the fewest results in a window before FailureRatio
	// applies. Defaults to 10.
	MinRequests int `yaml:"min_requests"`
	// FailureRatio opens the breaker when failures/results reaches it, in
	// (0, 1]. Defaults to 0.5.
	FailureRatio float64 `yaml:"failure_ratio"`
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Defaults to 5.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// OpenTimeout is the mean time the breaker stays open before probing
	// (jittered 75-125 %). Defaults to 3s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes is how many probes half-open lets through at once;
	// that many successes close it. Defaults to 3.
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// Classes are the four priority classes' settings.
type Classes struct {
	// Critical defaults to weight 8, max wait 30s, headroom 0.
	Critical Class `yaml:"critical"`
	// High defaults to weight 4, max wait 1m, headroom 0.10.
	High Class `yaml:"high"`
	// Normal defaults to weight 2, max wait 5m, headroom 0.20.
	Normal Class `yaml:"normal"`
	// Low defaults to weight 1, max wait 30m, headroom 0.20.
	Low Class `yaml:"low"`
}

// Class is one priority class's scheduling settings.
type Class struct {
	// Weight is the class's share in weighted fair queueing, > 0.
	// Defaults to the profile's, else 8, 4, 2, 1 (critical to low).
	Weight float64 `yaml:"weight"`
	// MaxWait is the class's aging bound and the deadline of a request
	// that sets none (a context deadline also bounds the wait). Defaults
	// to the profile's, else 30s, 1m, 5m, 30m (critical to low).
	MaxWait time.Duration `yaml:"max_wait"`
	// Headroom is the share (0 to <1) of each quota bucket's depth that
	// requests of this class leave unused while a more urgent class is
	// active; negative means none. Defaults to the profile's, else 0,
	// 0.1, 0.2, 0.2 (critical to low).
	Headroom float64 `yaml:"headroom"`
}

// config converts u to the engine's upstream config: the one place the
// public and the internal structs meet (TestUpstreamMirrorsConfig keeps
// them in step).
func (u Upstream) config() upstream.Config {
	class := func(c Class) upstream.Class {
		return upstream.Class{Weight: c.Weight, MaxWait: c.MaxWait, Headroom: c.Headroom}
	}
	limits := func(l Limits) upstream.Limits {
		return upstream.Limits{
			RequestsPerMinute:     l.RequestsPerMinute,
			InputTokensPerMinute:  l.InputTokensPerMinute,
			OutputTokensPerMinute: l.OutputTokensPerMinute,
			TokensPerMinute:       l.TokensPerMinute,
			MaxConcurrency:        l.MaxConcurrency,
		}
	}
	var keys []upstream.Key
	for _, k := range u.APIKeys {
		keys = append(keys, upstream.Key{Key: k.Key, Limits: limits(k.Limits), Org: k.Org})
	}
	var orgs map[string]upstream.Org
	if u.Orgs != nil {
		orgs = make(map[string]upstream.Org, len(u.Orgs))
		for name, o := range u.Orgs {
			orgs[name] = upstream.Org{Limits: limits(o.Limits)}
		}
	}
	return upstream.Config{
		Name:              u.Name,
		Protocol:          llm.Protocol(u.Protocol),
		BaseURL:           u.BaseURL,
		APIKey:            u.APIKey,
		APIKeys:           keys,
		Orgs:              orgs,
		KeyProbeInterval:  u.KeyProbeInterval,
		Profile:           upstream.Profile(u.Profile),
		Limits:            limits(u.Limits),
		BurstSeconds:      u.BurstSeconds,
		SafetyMargin:      u.SafetyMargin,
		MaxSafetyMargin:   u.MaxSafetyMargin,
		OutputReservation: u.OutputReservation,
		JitterAllowance:   u.JitterAllowance,
		MinConcurrency:    u.MinConcurrency,
		RequestTimeout:    u.RequestTimeout,
		HeadroomWindow:    u.HeadroomWindow,
		Retry: upstream.Retry{
			BaseDelay:   u.Retry.BaseDelay,
			MaxDelay:    u.Retry.MaxDelay,
			MaxAttempts: u.Retry.MaxAttempts,
			BudgetRatio: u.Retry.BudgetRatio,
			BudgetMin:   u.Retry.BudgetMin,
		},
		Breaker: upstream.Breaker{
			Window:              u.Breaker.Window,
			MinRequests:         u.Breaker.MinRequests,
			FailureRatio:        u.Breaker.FailureRatio,
			ConsecutiveFailures: u.Breaker.ConsecutiveFailures,
			OpenTimeout:         u.Breaker.OpenTimeout,
			HalfOpenProbes:      u.Breaker.HalfOpenProbes,
		},
		Classes: upstream.Classes{
			Critical: class(u.Classes.Critical),
			High:     class(u.Classes.High),
			Normal:   class(u.Classes.Normal),
			Low:      class(u.Classes.Low),
		},
	}
}
