package server

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"go.yaml.in/yaml/v3"
)

// Defaults for Config fields.
const (
	// ListenDefault is the address the gateway listens on.
	ListenDefault = "127.0.0.1:8080"
	// StoreDefault is the job-queue store.
	StoreDefault = "sqlite:./sluice.db"
	// StoreNone turns the durable job queue off: the gateway proxies only.
	StoreNone = "none"
	// MaxBodyBytesDefault is the largest request body accepted on a
	// scheduled route: Anthropic's own Messages limit (32 MB).
	MaxBodyBytesDefault = 32 << 20
	// ShutdownGraceDefault is how long Stop lets in-flight requests finish.
	ShutdownGraceDefault = 30 * time.Second
	// RequestTimeoutDefault bounds the wait for an upstream's response
	// headers, as the official SDKs do (10 minutes).
	RequestTimeoutDefault = 10 * time.Minute
	// AnthropicBaseURLDefault and OpenAIBaseURLDefault are the upstreams
	// used without a config file.
	AnthropicBaseURLDefault = "https://api.anthropic.com"
	OpenAIBaseURLDefault    = "https://api.openai.com"
	// DefaultPriorityDefault and MaxPriorityDefault bound a client's classes.
	DefaultPriorityDefault = llm.Normal
	MaxPriorityDefault     = llm.Critical
)

// Config is the gateway's configuration, read from YAML by LoadConfig or
// built from the environment by EnvConfig.
type Config struct {
	// Listen is the TCP address to serve on. Defaults to 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// AllowPublic permits a non-loopback Listen address when no Clients are
	// configured (any key is then accepted). Defaults to false.
	AllowPublic bool `yaml:"allow_public"`
	// Store is the job-queue store: sqlite:PATH or postgres://... Defaults
	// to sqlite:./sluice.db.
	Store string `yaml:"store"`
	// Jobs tunes the durable job queue. Defaults to the jobs package's
	// defaults.
	Jobs JobsConfig `yaml:"jobs"`
	// MaxBodyBytes is the largest request body accepted on a scheduled
	// route; larger bodies get 413. Defaults to 32 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ShutdownGrace is how long Stop waits for in-flight requests before
	// cutting them off. Defaults to 30s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// Upstreams are the provider APIs, each served under /{name}/.
	// At least one is required. Defaults to none.
	Upstreams []UpstreamConfig `yaml:"upstreams"`
	// Clients are the callers allowed in, each with its own key. With none,
	// any key is accepted. Defaults to none.
	Clients []ClientConfig `yaml:"clients"`
}

// UpstreamConfig is one provider API and how its traffic is shaped. Zero
// numeric fields take the dispatcher's defaults (docs/config.md lists them).
type UpstreamConfig struct {
	// Name routes /{name}/... to this upstream. Required: lower-case
	// letters, digits, '-' and '_'. Defaults to none.
	Name string `yaml:"name"`
	// Protocol is anthropic or openai. Required. Defaults to none.
	Protocol llm.Protocol `yaml:"protocol"`
	// BaseURL is the provider's root URL. Defaults to the protocol's
	// public API (https://api.anthropic.com or https://api.openai.com).
	BaseURL string `yaml:"base_url"`
	// APIKey is the provider key, usually ${ENV_VAR}. Required; it never
	// leaves the gateway. Defaults to none.
	APIKey string `yaml:"api_key"`
	// Limits are the provider quotas to stay under. Defaults to no local
	// limit (learned from the provider's rate-limit headers).
	Limits LimitsConfig `yaml:"limits"`
	// BurstSeconds is how many seconds of refill a quota bucket holds
	// when full, in (0, 60]. Defaults to 5 (dispatch.BurstSecondsDefault).
	BurstSeconds float64 `yaml:"burst_seconds"`
	// SafetyMargin is the share of each quota Sluice lets itself use, in
	// (0, 1]. Defaults to 0.98 (dispatch.SafetyMarginDefault).
	SafetyMargin float64 `yaml:"safety_margin"`
	// JitterAllowance keeps the quota buckets this much refill shallower
	// than the provider's burst, so requests delayed unevenly on their way
	// cannot reach it faster than it refills. Defaults to 100ms
	// (flow.JitterAllowanceDefault); negative turns it off; at most 1m.
	JitterAllowance time.Duration `yaml:"jitter_allowance"`
	// MinConcurrency is the floor of the adaptive concurrency limit.
	// Defaults to 4 (dispatch.MinConcurrencyDefault), or
	// limits.max_concurrency when that is lower.
	MinConcurrency int `yaml:"min_concurrency"`
	// RequestTimeout bounds how long one upstream attempt may take to
	// return its response headers (a stream may then run for as long as it
	// needs). Defaults to 10m (RequestTimeoutDefault).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// Retry shapes retries of failed attempts. Defaults to the dispatcher's.
	Retry RetryConfig `yaml:"retry"`
	// Breaker is the circuit breaker. Defaults to the dispatcher's.
	Breaker BreakerConfig `yaml:"breaker"`
	// Classes sets each priority class's weight and max wait, keyed by
	// class name (critical, high, normal, low). Defaults to the
	// dispatcher's weights and waits.
	Classes map[string]ClassConfig `yaml:"classes"`
}

// LimitsConfig are per-minute quotas; 0 means no local limit.
type LimitsConfig struct {
	// RequestsPerMinute is the RPM quota. Defaults to 0 (none).
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// InputTokensPerMinute is Anthropic's ITPM. Defaults to 0 (none).
	InputTokensPerMinute int64 `yaml:"input_tokens_per_minute"`
	// OutputTokensPerMinute is Anthropic's OTPM. Defaults to 0 (none).
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
	// TokensPerMinute is the combined TPM (OpenAI). Defaults to 0 (none).
	TokensPerMinute int64 `yaml:"tokens_per_minute"`
	// MaxConcurrency caps requests in flight upstream. Defaults to 64
	// (dispatch.MaxConcurrencyDefault).
	MaxConcurrency int `yaml:"max_concurrency"`
}

// RetryConfig shapes retries.
type RetryConfig struct {
	// BaseDelay is the first retry's full-jitter backoff ceiling.
	// Defaults to 500ms (dispatch.BaseDelayDefault).
	BaseDelay time.Duration `yaml:"base_delay"`
	// MaxDelay caps the backoff ceiling. Defaults to 8s
	// (dispatch.MaxDelayDefault).
	MaxDelay time.Duration `yaml:"max_delay"`
	// MaxAttempts bounds the attempts that fail with overload or transient
	// errors (rate-limit waits do not count; 1 = no retry). Defaults to 4
	// (dispatch.MaxAttemptsDefault).
	MaxAttempts int `yaml:"max_attempts"`
	// BudgetRatio is the share of recent requests that may be retries
	// (0–1). Defaults to 0.2 (dispatch.BudgetRatioDefault).
	BudgetRatio float64 `yaml:"budget_ratio"`
	// BudgetMin is the retries per second always allowed. Defaults to 3
	// (dispatch.BudgetMinDefault).
	BudgetMin float64 `yaml:"budget_min"`
}

// BreakerConfig is the upstream's circuit breaker (flow.BreakerConfig).
type BreakerConfig struct {
	// Window is the closed-state counting interval. Defaults to 30s
	// (flow.BreakerWindowDefault).
	Window time.Duration `yaml:"window"`
	// MinRequests is the fewest results in a window before failure_ratio
	// applies. Defaults to 10 (flow.BreakerMinRequestsDefault).
	MinRequests int `yaml:"min_requests"`
	// FailureRatio trips the breaker when failures/results reaches it, in
	// (0, 1]. Defaults to 0.5 (flow.BreakerFailureRatioDefault).
	FailureRatio float64 `yaml:"failure_ratio"`
	// ConsecutiveFailures trips the breaker after this many failures in a
	// row. Defaults to 5 (flow.BreakerConsecutiveFailuresDefault).
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// OpenTimeout is the mean time the breaker stays open before probing.
	// Defaults to 10s (flow.BreakerOpenTimeoutDefault).
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes is how many probes half-open lets through at once.
	// Defaults to 3 (flow.BreakerHalfOpenProbesDefault).
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// ClassConfig is one priority class's scheduling share.
type ClassConfig struct {
	// Weight is the class's share in weighted fair queueing (> 0).
	// Defaults to 8, 4, 2, 1 for critical, high, normal, low
	// (flow.WeightsDefault).
	Weight float64 `yaml:"weight"`
	// MaxWait is the class's aging bound and the deadline of a request
	// that sets none. Defaults to 30s, 1m, 5m, 30m for critical, high,
	// normal, low (flow.MaxWaitDefault).
	MaxWait time.Duration `yaml:"max_wait"`
	// Headroom is the share (0 to <1) of each quota bucket's depth that
	// requests of this class leave unused, so more urgent classes are
	// admitted at once while the upstream is saturated; negative means
	// none. Defaults to 0, 0.10, 0.20, 0.20 for critical, high, normal,
	// low (flow.HeadroomDefault).
	Headroom float64 `yaml:"headroom"`
}

// ClientConfig is one caller allowed through the gateway.
type ClientConfig struct {
	// Name identifies the client for fairness and logs. Required.
	// Defaults to none.
	Name string `yaml:"name"`
	// Key is the client's secret, sent as x-api-key or Authorization:
	// Bearer. Required, unique. Defaults to none.
	Key string `yaml:"key"`
	// DefaultPriority is the class used without X-Priority. Defaults to
	// normal.
	DefaultPriority string `yaml:"default_priority"`
	// MaxPriority is the most urgent class the client may ask for; more
	// urgent requests are lowered to it. Defaults to critical.
	MaxPriority string `yaml:"max_priority"`
}

// LookupEnv reads an environment variable; os.LookupEnv in production.
type LookupEnv func(name string) (string, bool)

// LoadConfig reads, expands, defaults and validates the YAML file at path.
func LoadConfig(path string, lookup LookupEnv) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading config: %w", err)
	}
	cfg, err := ParseConfig(data, lookup)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig reads YAML config: ${VAR} and ${VAR:-default} are expanded in
// every value (an unset VAR without a default is an error naming it),
// unknown fields are rejected, and the result is defaulted and validated.
func ParseConfig(data []byte, lookup LookupEnv) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Config{}, fmt.Errorf("parsing YAML: %w", err)
	}
	if root.Kind == 0 {
		return Config{}, errors.New("parsing YAML: the file is empty")
	}
	if err := expandNode(&root, lookup); err != nil {
		return Config{}, err
	}
	// Re-encode the expanded tree so the strict decoder can reject unknown
	// fields (yaml.Node.Decode has no such option).
	expanded, err := yaml.Marshal(&root)
	if err != nil {
		return Config{}, fmt.Errorf("re-encoding expanded YAML: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("decoding config: %w", err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// EnvConfig is the configuration used without a config file: an anthropic
// upstream when ANTHROPIC_API_KEY is set and an openai one when
// OPENAI_API_KEY is set, no clients, everything else defaulted.
func EnvConfig(lookup LookupEnv) (Config, error) {
	var cfg Config
	if key, ok := lookup("ANTHROPIC_API_KEY"); ok && key != "" {
		cfg.Upstreams = append(cfg.Upstreams, UpstreamConfig{Name: "anthropic", Protocol: llm.Anthropic, APIKey: key})
	}
	if key, ok := lookup("OPENAI_API_KEY"); ok && key != "" {
		cfg.Upstreams = append(cfg.Upstreams, UpstreamConfig{Name: "openai", Protocol: llm.OpenAI, APIKey: key})
	}
	if len(cfg.Upstreams) == 0 {
		return Config{}, errors.New("no upstream: set ANTHROPIC_API_KEY and/or OPENAI_API_KEY, or pass --config FILE (see docs/config.md)")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Listen = cmp.Or(c.Listen, ListenDefault)
	c.Store = cmp.Or(c.Store, StoreDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.Upstreams = append([]UpstreamConfig(nil), c.Upstreams...)
	for i, u := range c.Upstreams {
		switch u.Protocol {
		case llm.Anthropic:
			u.BaseURL = cmp.Or(u.BaseURL, AnthropicBaseURLDefault)
		case llm.OpenAI:
			u.BaseURL = cmp.Or(u.BaseURL, OpenAIBaseURLDefault)
		}
		u.RequestTimeout = cmp.Or(u.RequestTimeout, RequestTimeoutDefault)
		c.Upstreams[i] = u
	}
	c.Clients = append([]ClientConfig(nil), c.Clients...)
	for i, cl := range c.Clients {
		cl.DefaultPriority = cmp.Or(cl.DefaultPriority, DefaultPriorityDefault.String())
		cl.MaxPriority = cmp.Or(cl.MaxPriority, MaxPriorityDefault.String())
		c.Clients[i] = cl
	}
	return c
}

// upstreamNameRE is what a route segment may be.
var upstreamNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// reservedNames are first path segments the server itself serves.
var reservedNames = map[string]bool{"v1": true, "healthz": true, "metrics": true}

// validate reports the first invalid field, named by its YAML path.
func (c Config) validate() error {
	if err := validateListen(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := validateStore(c.Store); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := c.Jobs.validate(); err != nil {
		return fmt.Errorf("jobs.%w", err)
	}
	if c.MaxBodyBytes < 0 {
		return errors.New("max_body_bytes: must be >= 0")
	}
	if c.ShutdownGrace < 0 {
		return errors.New("shutdown_grace: must be >= 0")
	}
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one upstream is required")
	}
	names := map[string]bool{}
	for i, u := range c.Upstreams {
		if err := u.validate(); err != nil {
			return fmt.Errorf("upstreams[%d].%w", i, err)
		}
		if names[u.Name] {
			return fmt.Errorf("upstreams[%d].name: duplicate upstream %q", i, u.Name)
		}
		names[u.Name] = true
	}
	clientNames, keys := map[string]bool{}, map[string]bool{}
	for i, cl := range c.Clients {
		if err := cl.validate(); err != nil {
			return fmt.Errorf("clients[%d].%w", i, err)
		}
		if clientNames[cl.Name] {
			return fmt.Errorf("clients[%d].name: duplicate client %q", i, cl.Name)
		}
		if keys[cl.Key] {
			return fmt.Errorf("clients[%d].key: the same key is used by another client", i)
		}
		clientNames[cl.Name], keys[cl.Key] = true, true
	}
	if len(c.Clients) == 0 && !c.AllowPublic && !isLoopback(c.Listen) {
		return fmt.Errorf("listen: %s is not a loopback address and no clients are configured, so anyone could use the upstream keys: configure clients or set allow_public: true", c.Listen)
	}
	return nil
}

// validate returns an error whose text starts with the field name, so that
// Config.validate can prefix it with "upstreams[i].".
func (u UpstreamConfig) validate() error {
	if !upstreamNameRE.MatchString(u.Name) {
		return fmt.Errorf("name: %q must be 1-63 lower-case letters, digits, '-' or '_'", u.Name)
	}
	if reservedNames[u.Name] {
		return fmt.Errorf("name: %q is reserved for the gateway's own routes", u.Name)
	}
	if _, err := llm.ParseProtocol(string(u.Protocol)); err != nil {
		return fmt.Errorf("protocol: %w", err)
	}
	if err := validateBaseURL(u.BaseURL); err != nil {
		return fmt.Errorf("base_url: %w", err)
	}
	if u.APIKey == "" {
		return errors.New("api_key: required (e.g. api_key: ${ANTHROPIC_API_KEY})")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"limits.requests_per_minute", u.Limits.RequestsPerMinute},
		{"limits.input_tokens_per_minute", u.Limits.InputTokensPerMinute},
		{"limits.output_tokens_per_minute", u.Limits.OutputTokensPerMinute},
		{"limits.tokens_per_minute", u.Limits.TokensPerMinute},
		{"limits.max_concurrency", int64(u.Limits.MaxConcurrency)},
		{"min_concurrency", int64(u.MinConcurrency)},
		{"retry.max_attempts", int64(u.Retry.MaxAttempts)},
		{"breaker.min_requests", int64(u.Breaker.MinRequests)},
		{"breaker.consecutive_failures", int64(u.Breaker.ConsecutiveFailures)},
		{"breaker.half_open_probes", int64(u.Breaker.HalfOpenProbes)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be >= 0", f.name)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"request_timeout", u.RequestTimeout},
		{"retry.base_delay", u.Retry.BaseDelay},
		{"retry.max_delay", u.Retry.MaxDelay},
		{"breaker.window", u.Breaker.Window},
		{"breaker.open_timeout", u.Breaker.OpenTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be >= 0", f.name)
		}
	}
	if u.JitterAllowance > time.Minute {
		return errors.New("jitter_allowance: must be <= 1m")
	}
	if u.Retry.MaxDelay > 0 && u.Retry.BaseDelay > u.Retry.MaxDelay {
		return errors.New("retry.base_delay: must be <= retry.max_delay")
	}
	if u.Limits.MaxConcurrency > 0 && u.MinConcurrency > u.Limits.MaxConcurrency {
		return errors.New("min_concurrency: must be <= limits.max_concurrency")
	}
	for _, f := range []struct {
		name   string
		v, max float64
	}{
		{"burst_seconds", u.BurstSeconds, 60},
		{"safety_margin", u.SafetyMargin, 1},
		{"retry.budget_ratio", u.Retry.BudgetRatio, 1},
		{"retry.budget_min", u.Retry.BudgetMin, 1e6},
		{"breaker.failure_ratio", u.Breaker.FailureRatio, 1},
	} {
		// 0 means "the default"; the negated form also rejects NaN.
		if !(f.v >= 0 && f.v <= f.max) {
			return fmt.Errorf("%s: must be > 0 and <= %g (0 for the default)", f.name, f.max)
		}
	}
	for name, cc := range u.Classes {
		if _, err := llm.ParsePriority(name); err != nil || name != strings.ToLower(name) || len(name) == 1 {
			return fmt.Errorf("classes.%s: unknown class (want critical, high, normal or low)", name)
		}
		if !(cc.Weight >= 0 && cc.Weight <= 1e6) {
			return fmt.Errorf("classes.%s.weight: must be > 0 (0 for the default)", name)
		}
		if cc.MaxWait < 0 {
			return fmt.Errorf("classes.%s.max_wait: must be >= 0", name)
		}
		if !(cc.Headroom < 1) || math.IsNaN(cc.Headroom) {
			return fmt.Errorf("classes.%s.headroom: must be < 1 (negative for none, 0 for the default)", name)
		}
	}
	return nil
}

func (cl ClientConfig) validate() error {
	if strings.TrimSpace(cl.Name) == "" {
		return errors.New("name: required")
	}
	if cl.Key == "" {
		return errors.New("key: required (e.g. key: ${SLUICE_KEY_WEB})")
	}
	def, err := llm.ParsePriority(cl.DefaultPriority)
	if err != nil {
		return fmt.Errorf("default_priority: %w", err)
	}
	maxP, err := llm.ParsePriority(cl.MaxPriority)
	if err != nil {
		return fmt.Errorf("max_priority: %w", err)
	}
	if def < maxP {
		return fmt.Errorf("default_priority: %s is more urgent than max_priority %s", def, maxP)
	}
	return nil
}

func validateListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	_ = host
	if port == "" {
		return fmt.Errorf("%q has no port", addr)
	}
	return nil
}

// isLoopback reports whether addr only listens on the loopback interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validateStore(s string) error {
	switch {
	case s == StoreNone:
		return nil
	case strings.HasPrefix(s, "sqlite:"):
		if strings.TrimPrefix(s, "sqlite:") == "" {
			return errors.New("sqlite: needs a path, e.g. sqlite:./sluice.db")
		}
		return nil
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("invalid PostgreSQL URL: %w", redactURLError(err))
		}
		if u.Host == "" {
			return errors.New("PostgreSQL URL needs a host, e.g. postgres://user@127.0.0.1:5432/sluice")
		}
		return nil
	}
	return fmt.Errorf("%q: want sqlite:PATH or postgres://USER@HOST/DB", redact(s))
}

func validateBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL: %w", redactURLError(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: has no host", s)
	}
	if u.User != nil {
		return errors.New("must not contain credentials: use api_key")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: must not have a query or fragment", s)
	}
	return nil
}

// redactURLError drops the URL (which may hold a password) from a parse
// error.
func redactURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// redact hides all but the scheme of a store string in error messages.
func redact(s string) string {
	if i := strings.Index(s, ":"); i >= 0 && i < 16 {
		return s[:i+1] + "..."
	}
	return "..."
}
