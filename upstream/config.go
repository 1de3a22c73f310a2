package upstream

import (
	"cmp"
	"time"
)

// Defaults of Config, the one place they are defined. Per-class defaults
// are the balanced profile's (profile.go).
const (
	// AnthropicBaseURLDefault is an anthropic upstream's base URL.
	AnthropicBaseURLDefault = "https://api.anthropic.com"
	// OpenAIBaseURLDefault is an openai upstream's base URL.
	OpenAIBaseURLDefault = "https://api.openai.com"
	// ProfileDefault is the profile of an upstream that names none.
	ProfileDefault = Balanced
	// MaxConcurrencyDefault caps requests in flight upstream.
	MaxConcurrencyDefault = 64
	// MinConcurrencyDefault is the adaptive concurrency floor (lowered to
	// limits.max_concurrency when that is lower).
	MinConcurrencyDefault = 4
	// BurstSecondsDefault is a quota bucket's depth in seconds of refill:
	// providers enforce per-minute limits over shorter intervals, so start
	// shallow and deepen only when the provider's headers show room.
	BurstSecondsDefault = 5.0
	// SafetyMarginDefault is the share of each quota Sluice uses after a
	// provider 429 (the wide margin).
	SafetyMarginDefault = 0.98
	// MaxSafetyMarginDefault is the share of each quota Sluice uses while
	// no 429 is seen (the narrow margin), when safety_margin is not set.
	MaxSafetyMarginDefault = 0.995
	// OutputReservationMaxTokens reserves a request's max_tokens against
	// the output quota until its usage is known, as providers that charge
	// max_tokens at admission do (OpenAI TPM, Anthropic OTPM as documented
	// in 2025).
	OutputReservationMaxTokens = "max_tokens"
	// OutputReservationLearned reserves what requests to the same model
	// have used at most (a high quantile of output/max_tokens), for a
	// provider that charges only the output produced (Anthropic OTPM as
	// documented in 2026).
	OutputReservationLearned = "learned"
	// OutputReservationDefault is the safe choice: the worst case.
	OutputReservationDefault = OutputReservationMaxTokens
	// JitterAllowanceDefault is how much refill the buckets stay below the
	// provider's burst, for requests delayed unevenly on their way.
	JitterAllowanceDefault = 100 * time.Millisecond
	// RequestTimeoutDefault bounds the wait for an attempt's response
	// headers, as the official SDKs do (10 minutes).
	RequestTimeoutDefault = 10 * time.Minute
	// HeadroomWindowDefault is how long a more urgent class's last request
	// keeps the lower classes' headroom in force.
	HeadroomWindowDefault = time.Minute
	// BurstRoomDefault is the largest share of each quota bucket's depth
	// the lower classes leave unused for the learned bursts of the more
	// urgent classes (the balanced profile's).
	BurstRoomDefault = 0.5
	// AbandonedStreamDrainDefault is how long the engine reads on a
	// stream its client left, to learn the usage the provider bills.
	AbandonedStreamDrainDefault = time.Minute
	// BurstMemoryDefault is how long a burst of urgent requests is
	// remembered before the room kept for it decays (and the decay's
	// time constant).
	BurstMemoryDefault = 10 * time.Minute
	// BaseDelayDefault is the first retry's full-jitter backoff ceiling.
	BaseDelayDefault = 500 * time.Millisecond
	// MaxDelayDefault caps the backoff ceiling.
	MaxDelayDefault = 8 * time.Second
	// MaxAttemptsDefault is how many attempts ending in an overload or
	// transient failure a request may make (rate-limit waits do not count).
	MaxAttemptsDefault = 4
	// BudgetRatioDefault is the share of recent requests that may be
	// retries (Envoy's budget_percent, Linkerd's retryRatio).
	BudgetRatioDefault = 0.2
	// BudgetMinDefault is the retries per second always allowed, so a
	// quiet upstream can still retry.
	BudgetMinDefault = 3.0
	// BreakerWindowDefault is the breaker's closed-state counting interval.
	BreakerWindowDefault = 30 * time.Second
	// BreakerMinRequestsDefault is the fewest results in a window before
	// the failure ratio can open the breaker.
	BreakerMinRequestsDefault = 10
	// BreakerFailureRatioDefault opens the breaker at this failure share.
	BreakerFailureRatioDefault = 0.5
	// BreakerConsecutiveFailuresDefault opens the breaker after this many
	// failures in a row.
	BreakerConsecutiveFailuresDefault = 5
	// BreakerOpenTimeoutDefault is the mean time the breaker stays open
	// before probing: short, so full rate returns within ~5 s of the
	// provider's recovery while an outage sees about one probe a second.
	BreakerOpenTimeoutDefault = 3 * time.Second
	// BreakerHalfOpenProbesDefault is how many probes half-open admits;
	// that many successes close it.
	BreakerHalfOpenProbesDefault = 3
)

// Per-class defaults (the balanced profile), critical first. Weights 8/4/2/1
// give critical traffic eight times low's share under saturation; max waits
// bound how long overtaking can delay a request; headroom keeps 20 % of the
// buckets for more urgent arrivals (why 20 and not 10: BENCHMARKS.md,
// "History").
var (
	// WeightsDefault are the classes' weighted-fair-queueing shares.
	WeightsDefault = [NumPriorities]float64{8, 4, 2, 1}
	// MaxWaitDefault are the classes' aging bounds and default deadlines.
	MaxWaitDefault = [NumPriorities]time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute}
	// HeadroomDefault are the shares of each bucket's depth a class leaves
	// unused while a more urgent class is active.
	HeadroomDefault = [NumPriorities]float64{0, 0.10, 0.20, 0.20}
)

// Config is one upstream: a provider API and how its traffic is shaped.
// It is an entry of the gateway's upstreams: list, with the same fields and
// YAML names, and the Go library's sluice.Upstream. A zero field means
// "the profile's value, else the default".
type Config struct {
	// Name names the upstream: its route (/{name}/...) in the gateway, and
	// its label in errors and metrics. Required: 1-63 lower-case letters,
	// digits, '-' and '_'. Defaults to none.
	Name string `yaml:"name"`
	// Protocol is the wire protocol, anthropic or openai. Required.
	// Defaults to none.
	Protocol Protocol `yaml:"protocol"`
	// BaseURL is the provider's root URL; the request's path is appended.
	// Defaults to the protocol's public API, https://api.anthropic.com or
	// https://api.openai.com (AnthropicBaseURLDefault, OpenAIBaseURLDefault).
	BaseURL string `yaml:"base_url"`
	// APIKey is the provider key, sent as x-api-key (Anthropic) or
	// Authorization: Bearer (OpenAI). The gateway requires it. Defaults to
	// none: no credential is sent.
	APIKey string `yaml:"api_key"`
	// APIKeys is a pool of provider keys used instead of APIKey: strings,
	// or {key, limits, org} objects (Key). Each key has its own quota
	// buckets, 429 pause and concurrency; requests go to the key with the
	// most room (docs/pools.md). Defaults to none: APIKey alone is a pool
	// of one.
	APIKeys []Key `yaml:"api_keys"`
	// Orgs are account-level quotas shared by the keys naming the org
	// (Key.Org). Defaults to none: an org named by keys but not listed
	// here learns its limits from the provider's headers.
	Orgs map[string]Org `yaml:"orgs"`
	// KeyProbeInterval is how long a key taken out of the pool (revoked,
	// out of credit) waits before one request probes it again. Defaults to
	// 1m (KeyProbeIntervalDefault).
	KeyProbeInterval time.Duration `yaml:"key_probe_interval"`
	// Fallbacks are upstreams of the same protocol tried, in order, when
	// this one is unavailable (breaker open, outage) or would make a
	// request miss its deadline (docs/pools.md). The gateway's only: a
	// sluice.Transport has one upstream and refuses them. Defaults to none.
	Fallbacks []Fallback `yaml:"fallbacks"`
	// FallbackClasses are the priority classes that may fall back, by name
	// (critical, high, normal, low). Defaults to every class.
	FallbackClasses []string `yaml:"fallback_classes"`
	// BatchPriority is the class (critical, high, normal, low) of the
	// requests of a batch made through the provider's own batch API on the
	// gateway (/v1/messages/batches, /v1/batches) when the create names
	// none with X-Priority. Defaults to low (BatchPriorityDefault).
	BatchPriority string `yaml:"batch_priority"`
	// Batch routes the jobs of some classes to the provider's Batch API
	// when their deadline leaves room (BatchRoute). Defaults to none.
	Batch BatchRoute `yaml:"batch"`
	// Profile presets the class, retry and quota settings left zero:
	// latency, throughput or balanced. Defaults to balanced
	// (ProfileDefault).
	Profile Profile `yaml:"profile"`
	// Limits are the provider quotas to stay under. Defaults to none known
	// (learned from the provider's rate-limit headers).
	Limits Limits `yaml:"limits"`
	// BurstSeconds is how many seconds of refill a full quota bucket
	// holds, in (0, 60]. Defaults to the profile's, else 5
	// (BurstSecondsDefault).
	BurstSeconds float64 `yaml:"burst_seconds"`
	// SafetyMargin is the share of each quota Sluice lets itself use, in
	// (0, 1]. Defaults to the profile's, else 0.98 (SafetyMarginDefault).
	SafetyMargin float64 `yaml:"safety_margin"`
	// MaxSafetyMargin is the share of each quota used while no provider
	// 429 is seen, in [safety_margin, 1]: after a 429 the margin drops to
	// SafetyMargin and narrows back linearly over a minute. Defaults to
	// 0.995 (MaxSafetyMarginDefault) when safety_margin is not set, else
	// to safety_margin (a fixed margin).
	MaxSafetyMargin float64 `yaml:"max_safety_margin"`
	// OutputReservation is what a request reserves against the output
	// quota before its usage is known: max_tokens (the worst case, for a
	// provider that reserves it too) or learned (a high quantile of what
	// requests to the same model used, for a provider that counts only
	// the output produced). Defaults to max_tokens
	// (OutputReservationDefault).
	OutputReservation string `yaml:"output_reservation"`
	// JitterAllowance keeps the quota buckets this much refill shallower
	// than the provider's burst, so requests delayed unevenly on their way
	// cannot reach it faster than it refills; negative turns it off; at
	// most 1m. Defaults to 100ms (JitterAllowanceDefault).
	JitterAllowance time.Duration `yaml:"jitter_allowance"`
	// MinConcurrency is the floor of the adaptive concurrency limit, at
	// most Limits.MaxConcurrency. Defaults to 4 (MinConcurrencyDefault), or
	// Limits.MaxConcurrency when that is lower.
	MinConcurrency int `yaml:"min_concurrency"`
	// RequestTimeout bounds how long one attempt may wait for the
	// upstream's response headers (a stream then runs as long as it
	// needs); in the Go library it applies to the default HTTP client only
	// (see sluice.WithHTTPClient). Defaults to 10m (RequestTimeoutDefault).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// HeadroomWindow is how recently a more urgent class must have sent a
	// request for a class's headroom to apply: traffic of one class alone
	// uses the whole bucket. Defaults to 1m (HeadroomWindowDefault).
	HeadroomWindow time.Duration `yaml:"headroom_window"`
	// BurstRoom is the largest share, in [0, 1], of each quota bucket's
	// depth that a class leaves unused for the bursts the more urgent
	// classes were seen to send (learned per dimension from their
	// arrivals, docs/engine.md); negative keeps no learned room (the
	// classes' headroom alone). Defaults to the profile's, else 0.5
	// (BurstRoomDefault).
	BurstRoom float64 `yaml:"burst_room"`
	// BurstMemory is how long a burst of urgent requests is remembered:
	// the room kept for it is held this long after the burst, then decays
	// with this time constant. Defaults to 10m (BurstMemoryDefault).
	BurstMemory time.Duration `yaml:"burst_memory"`
	// AbandonedStreamDrain is how long the engine goes on reading a
	// stream whose client left before its end, to learn the usage the
	// provider bills (the provider goes on generating meanwhile): the
	// client's budget and the output quota are then settled with it. A
	// stream not ended by then (or past 8 MiB) is cut and charged its
	// worst case (input and max_tokens); negative cuts it at once, with
	// that charge. Defaults to 1m (AbandonedStreamDrainDefault).
	AbandonedStreamDrain time.Duration `yaml:"abandoned_stream_drain"`
	// Retry shapes retries of attempts that fail with an overload or
	// transient error. Defaults to the profile's, else Retry's
	// defaults.
	Retry Retry `yaml:"retry"`
	// Breaker is the circuit breaker. Defaults to Breaker's defaults.
	Breaker Breaker `yaml:"breaker"`
	// PromptCache is how admission counts the provider's prompt cache and
	// keeps requests on the key that holds it. Defaults to PromptCache's
	// defaults.
	PromptCache PromptCache `yaml:"prompt_cache"`
	// ResponseRetention is how long the provider keeps a stored OpenAI
	// Response, and so how long the gateway remembers which key of the
	// pool created it (GET, DELETE, cancel, input_items and
	// previous_response_id reach that key; with a job store, across
	// restarts and the nodes of a cluster). Defaults to 720h, OpenAI's 30
	// days (ResponseRetentionDefault).
	ResponseRetention time.Duration `yaml:"response_retention"`
	// Classes are the priority classes' scheduling settings. Defaults to
	// the profile's, else Class's defaults (WeightsDefault, MaxWaitDefault
	// and HeadroomDefault).
	Classes Classes `yaml:"classes"`
	// Flex sends an OpenAI upstream's jobs in the flex service tier (batch
	// prices, slower answers) when their deadline leaves room. Defaults to
	// off.
	Flex Flex `yaml:"flex"`
}

// FlexMinSlackDefault is how much time a job's deadline must leave for it
// to be sent in the flex tier.
const FlexMinSlackDefault = 10 * time.Minute

// FlexTimeoutDefault bounds the wait for the response headers of a request
// in the flex tier: OpenAI answers flex requests more slowly, and its flex
// guide raises its SDKs' 10-minute timeout to 15 minutes for them.
const FlexTimeoutDefault = 15 * time.Minute

// Flex is an OpenAI upstream's use of the flex service tier for jobs (never
// for live requests, which keep the tier their client asks for).
type Flex struct {
	// Enabled sends a job in the flex tier when its body names no
	// service_tier, it calls /v1/chat/completions or /v1/responses, and
	// its deadline (if any) is at least MinSlack away; a job the provider
	// refused for want of flex capacity (429 resource_unavailable) is
	// retried in the standard tier. Defaults to false.
	Enabled bool `yaml:"enabled"`
	// MinSlack is how far a job's deadline must be for the flex tier.
	// Defaults to FlexMinSlackDefault.
	MinSlack time.Duration `yaml:"min_slack"`
	// Timeout bounds how long a request sent in the flex tier (a job the
	// rule sent there, or a live request whose body asks for it, enabled
	// or not) may wait for its response headers, in place of
	// RequestTimeout; never less than RequestTimeout. Defaults to 15m
	// (FlexTimeoutDefault).
	Timeout time.Duration `yaml:"timeout"`
}

// Limits are an upstream's per-minute quotas and concurrency cap; a zero
// quota is unknown (learned from the provider's rate-limit headers).
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
	// MaxConcurrency caps requests in flight upstream. Defaults to 64
	// (MaxConcurrencyDefault).
	MaxConcurrency int `yaml:"max_concurrency"`
	// CountTokensPerMinute is the token-counting requests per minute
	// (Anthropic POST /v1/messages/count_tokens, OpenAI POST
	// /v1/responses/input_tokens), a bucket of its own that the model
	// endpoints' quota never pays for. Defaults to 0 (learned from the
	// route's rate-limit headers).
	CountTokensPerMinute int64 `yaml:"count_tokens_per_minute"`
}

// PromptCache is how admission counts the provider's prompt cache
// (docs/pools.md, "Prompt caching and key affinity").
type PromptCache struct {
	// Admission charges a request's input with what the provider will
	// count: a prefix the same key sent within the cache's lifetime is
	// read from the cache, and Anthropic's ITPM does not count cache reads
	// (but for the models whose limits do). on or off (the whole prompt is
	// charged, then corrected by the usage). Defaults to on
	// (PromptCacheAdmissionDefault).
	Admission string `yaml:"admission"`
	// Affinity keeps requests that share a cached prefix or a session
	// (metadata.user_id, prompt_cache_key, user, X-Sluice-Session) on the
	// key that holds their cache, unless it cannot admit them before their
	// deadline while another key can. on or off (the key with the most
	// room). Defaults to on (PromptCacheAffinityDefault).
	Affinity string `yaml:"affinity"`
	// Prefixes bounds each key's record of the prefixes it recently sent
	// (the least recently used are forgotten first), and the sessions the
	// pool remembers. Defaults to 4096 (PromptCachePrefixesDefault).
	Prefixes int `yaml:"prefixes"`
}

// Prompt cache settings.
const (
	PromptCacheOn  = "on"
	PromptCacheOff = "off"
	// PromptCacheAdmissionDefault and PromptCacheAffinityDefault are
	// PromptCache's defaults.
	PromptCacheAdmissionDefault = PromptCacheOn
	PromptCacheAffinityDefault  = PromptCacheOn
	// PromptCachePrefixesDefault bounds a key's record of prefixes.
	PromptCachePrefixesDefault = 4096
	// ResponseRetentionDefault is how long OpenAI keeps a stored Response
	// (its "30 days by default"): Config.ResponseRetention's default.
	ResponseRetentionDefault = 30 * 24 * time.Hour
)

// On reports whether a PromptCache switch (after WithDefaults) is on.
func (PromptCache) On(v string) bool { return v != PromptCacheOff }

// Retry shapes retries of attempts that fail with an overload or transient
// error.
type Retry struct {
	// BaseDelay is the first retry's full-jitter backoff ceiling. Defaults
	// to the profile's, else 500ms (BaseDelayDefault).
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the backoff ceiling, at least BaseDelay. Defaults to
	// the profile's, else 8s (MaxDelayDefault), or BaseDelay when larger.
	MaxDelay time.Duration `yaml:"max_delay"`
	// MaxAttempts bounds the attempts that fail with overload or transient
	// errors (rate-limit waits do not count; 1 = no retry). Defaults to the
	// profile's, else 4 (MaxAttemptsDefault).
	MaxAttempts int `yaml:"max_attempts"`
	// BudgetRatio is the share of recent requests that may be retries, in
	// (0, 1]. Defaults to the profile's, else 0.2 (BudgetRatioDefault).
	BudgetRatio float64 `yaml:"budget_ratio"`
	// BudgetMin is the retries per second always allowed. Defaults to 3
	// (BudgetMinDefault).
	BudgetMin float64 `yaml:"budget_min"`
}

// Breaker is an upstream's circuit breaker.
type Breaker struct {
	// Window is the closed-state counting interval. Defaults to 30s
	// (BreakerWindowDefault).
	Window time.Duration `yaml:"window"`
	// MinRequests is the fewest results in a window before FailureRatio
	// applies. Defaults to 10 (BreakerMinRequestsDefault).
	MinRequests int `yaml:"min_requests"`
	// FailureRatio opens the breaker when failures/results reaches it, in
	// (0, 1]. Defaults to 0.5 (BreakerFailureRatioDefault).
	FailureRatio float64 `yaml:"failure_ratio"`
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Defaults to 5 (BreakerConsecutiveFailuresDefault).
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// OpenTimeout is the mean time the breaker stays open before probing
	// (each opening lasts a jittered 75-125 % of it). Defaults to 3s
	// (BreakerOpenTimeoutDefault).
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes is how many probes half-open lets through at once;
	// that many successes close it. Defaults to 3
	// (BreakerHalfOpenProbesDefault).
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// Classes are the four priority classes' settings.
type Classes struct {
	// Critical is the most urgent class. Defaults to weight 8, max wait
	// 30s, headroom 0 (balanced).
	Critical Class `yaml:"critical"`
	// High defaults to weight 4, max wait 1m, headroom 0.10 (balanced).
	High Class `yaml:"high"`
	// Normal defaults to weight 2, max wait 5m, headroom 0.20 (balanced).
	Normal Class `yaml:"normal"`
	// Low defaults to weight 1, max wait 30m, headroom 0.20 (balanced).
	Low Class `yaml:"low"`
}

// Class is one priority class's scheduling settings.
type Class struct {
	// Weight is the class's share in weighted fair queueing, > 0.
	// Defaults to the profile's, else 8, 4, 2, 1 (critical to low;
	// WeightsDefault).
	Weight float64 `yaml:"weight"`
	// MaxWait is the class's aging bound and the deadline of a request
	// that sets none (a context deadline also bounds the wait). Defaults to
	// the profile's, else 30s, 1m, 5m, 30m (critical to low;
	// MaxWaitDefault).
	MaxWait time.Duration `yaml:"max_wait"`
	// Headroom is the share (0 to <1) of each quota bucket's depth that
	// requests of this class leave unused while a more urgent class is
	// active, so that class is admitted at once under saturation; negative
	// means none. Defaults to the profile's, else 0, 0.1, 0.2, 0.2
	// (critical to low; HeadroomDefault).
	Headroom float64 `yaml:"headroom"`
}

// Get returns class p's settings.
func (c Classes) Get(p Priority) Class { return *c.ptr(p) }

// ptr returns a pointer to class p's settings (p must be valid).
func (c *Classes) ptr(p Priority) *Class {
	switch p {
	case Critical:
		return &c.Critical
	case High:
		return &c.High
	case Normal:
		return &c.Normal
	default:
		return &c.Low
	}
}

// WithDefaults returns c with its profile's values in the fields left zero,
// then the defaults in the rest. It is pure (c is not modified) and
// idempotent. An unknown profile fills nothing (Validate reports it).
func (c Config) WithDefaults() Config {
	c.Profile = cmp.Or(c.Profile, ProfileDefault)
	c.Batch = c.Batch.WithDefaults()
	if p, ok := profiles[c.Profile]; ok {
		c = p.fill(c)
	}
	switch c.Protocol {
	case Anthropic:
		c.BaseURL = cmp.Or(c.BaseURL, AnthropicBaseURLDefault)
	case OpenAI:
		c.BaseURL = cmp.Or(c.BaseURL, OpenAIBaseURLDefault)
	}
	c.Limits.MaxConcurrency = cmp.Or(c.Limits.MaxConcurrency, MaxConcurrencyDefault)
	c.MinConcurrency = cmp.Or(c.MinConcurrency, min(MinConcurrencyDefault, max(c.Limits.MaxConcurrency, 1)))
	c.BurstSeconds = cmp.Or(c.BurstSeconds, BurstSecondsDefault)
	if c.MaxSafetyMargin == 0 {
		c.MaxSafetyMargin = c.SafetyMargin // a margin the user chose stays fixed
		if c.SafetyMargin == 0 {
			c.MaxSafetyMargin = MaxSafetyMarginDefault
		}
	}
	c.SafetyMargin = cmp.Or(c.SafetyMargin, SafetyMarginDefault)
	c.OutputReservation = cmp.Or(c.OutputReservation, OutputReservationDefault)
	c.JitterAllowance = cmp.Or(c.JitterAllowance, JitterAllowanceDefault)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, RequestTimeoutDefault)
	c.HeadroomWindow = cmp.Or(c.HeadroomWindow, HeadroomWindowDefault)
	c.BurstRoom = cmp.Or(c.BurstRoom, BurstRoomDefault)
	c.BurstMemory = cmp.Or(c.BurstMemory, BurstMemoryDefault)
	c.AbandonedStreamDrain = cmp.Or(c.AbandonedStreamDrain, AbandonedStreamDrainDefault)
	c.KeyProbeInterval = cmp.Or(c.KeyProbeInterval, KeyProbeIntervalDefault)
	c.Flex.MinSlack = cmp.Or(c.Flex.MinSlack, FlexMinSlackDefault)
	c.Flex.Timeout = cmp.Or(c.Flex.Timeout, FlexTimeoutDefault)
	c.PromptCache.Admission = cmp.Or(c.PromptCache.Admission, PromptCacheAdmissionDefault)
	c.PromptCache.Affinity = cmp.Or(c.PromptCache.Affinity, PromptCacheAffinityDefault)
	c.PromptCache.Prefixes = cmp.Or(c.PromptCache.Prefixes, PromptCachePrefixesDefault)
	c.ResponseRetention = cmp.Or(c.ResponseRetention, ResponseRetentionDefault)
	c.Retry.BaseDelay = cmp.Or(c.Retry.BaseDelay, BaseDelayDefault)
	c.Retry.MaxDelay = cmp.Or(c.Retry.MaxDelay, max(MaxDelayDefault, c.Retry.BaseDelay))
	c.Retry.MaxAttempts = cmp.Or(c.Retry.MaxAttempts, MaxAttemptsDefault)
	c.Retry.BudgetRatio = cmp.Or(c.Retry.BudgetRatio, BudgetRatioDefault)
	c.Retry.BudgetMin = cmp.Or(c.Retry.BudgetMin, BudgetMinDefault)
	c.Breaker.Window = cmp.Or(c.Breaker.Window, BreakerWindowDefault)
	c.Breaker.MinRequests = cmp.Or(c.Breaker.MinRequests, BreakerMinRequestsDefault)
	c.Breaker.FailureRatio = cmp.Or(c.Breaker.FailureRatio, BreakerFailureRatioDefault)
	c.Breaker.ConsecutiveFailures = cmp.Or(c.Breaker.ConsecutiveFailures, BreakerConsecutiveFailuresDefault)
	c.Breaker.OpenTimeout = cmp.Or(c.Breaker.OpenTimeout, BreakerOpenTimeoutDefault)
	c.Breaker.HalfOpenProbes = cmp.Or(c.Breaker.HalfOpenProbes, BreakerHalfOpenProbesDefault)
	for p := range Priority(NumPriorities) {
		cl := c.Classes.ptr(p)
		cl.Weight = cmp.Or(cl.Weight, WeightsDefault[p])
		cl.MaxWait = cmp.Or(cl.MaxWait, MaxWaitDefault[p])
		cl.Headroom = cmp.Or(cl.Headroom, HeadroomDefault[p])
	}
	return c
}
