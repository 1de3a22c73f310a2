package upstream

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// nameRE is what an upstream name may be: a route segment and a metric
// label.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate reports the first invalid field of c once defaulted, named by
// its YAML path (e.g. "retry.base_delay: must be <= retry.max_delay"), so
// a caller can prefix it with "upstreams[i].". A zero field is valid: it
// takes the profile's value or the default.
func (c Config) Validate() error {
	if _, err := ParseProfile(string(cmp.Or(c.Profile, ProfileDefault))); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if !nameRE.MatchString(c.Name) {
		return fmt.Errorf("name: %q must be 1-63 lower-case letters, digits, '-' or '_'", c.Name)
	}
	if _, err := ParseProtocol(string(c.Protocol)); err != nil {
		return fmt.Errorf("protocol: %w", err)
	}
	if c.BatchPriority != "" {
		if _, err := ParsePriority(c.BatchPriority); err != nil {
			return fmt.Errorf("batch_priority: %w", err)
		}
	}
	if c.Flex.Enabled && c.Protocol != OpenAI {
		return fmt.Errorf("flex.enabled: only openai upstreams have a flex tier (this one is %s)", c.Protocol)
	}
	if err := c.Batch.validate(); err != nil {
		return err
	}
	d := c.WithDefaults()
	if err := d.validatePool(); err != nil {
		return err
	}
	if err := d.validateFallbacks(); err != nil {
		return err
	}
	if err := validateBaseURL(d.BaseURL); err != nil {
		return fmt.Errorf("base_url: %w", err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"limits.requests_per_minute", d.Limits.RequestsPerMinute},
		{"limits.input_tokens_per_minute", d.Limits.InputTokensPerMinute},
		{"limits.output_tokens_per_minute", d.Limits.OutputTokensPerMinute},
		{"limits.tokens_per_minute", d.Limits.TokensPerMinute},
		{"limits.max_concurrency", int64(d.Limits.MaxConcurrency)},
		{"limits.count_tokens_per_minute", d.Limits.CountTokensPerMinute},
		{"prompt_cache.prefixes", int64(d.PromptCache.Prefixes)},
		{"min_concurrency", int64(d.MinConcurrency)},
		{"retry.max_attempts", int64(d.Retry.MaxAttempts)},
		{"breaker.min_requests", int64(d.Breaker.MinRequests)},
		{"breaker.consecutive_failures", int64(d.Breaker.ConsecutiveFailures)},
		{"breaker.half_open_probes", int64(d.Breaker.HalfOpenProbes)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be >= 0", f.name)
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"request_timeout", d.RequestTimeout},
		{"response_retention", d.ResponseRetention},
		{"flex.min_slack", d.Flex.MinSlack},
		{"flex.timeout", d.Flex.Timeout},
		{"headroom_window", d.HeadroomWindow},
		{"burst_memory", d.BurstMemory},
		{"retry.base_delay", d.Retry.BaseDelay},
		{"retry.max_delay", d.Retry.MaxDelay},
		{"breaker.window", d.Breaker.Window},
		{"breaker.open_timeout", d.Breaker.OpenTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be >= 0", f.name)
		}
	}
	if d.BurstRoom > 1 {
		return errors.New("burst_room: must be <= 1 (a share of each bucket's depth; negative for none)")
	}
	if d.JitterAllowance > time.Minute {
		return errors.New("jitter_allowance: must be <= 1m")
	}
	if d.Retry.BaseDelay > d.Retry.MaxDelay {
		return errors.New("retry.base_delay: must be <= retry.max_delay")
	}
	if d.MinConcurrency > d.Limits.MaxConcurrency {
		return errors.New("min_concurrency: must be <= limits.max_concurrency")
	}
	for _, f := range []struct {
		name   string
		v, max float64
	}{
		{"burst_seconds", d.BurstSeconds, 60},
		{"safety_margin", d.SafetyMargin, 1},
		{"retry.budget_ratio", d.Retry.BudgetRatio, 1},
		{"retry.budget_min", d.Retry.BudgetMin, 1e6},
		{"breaker.failure_ratio", d.Breaker.FailureRatio, 1},
	} {
		// 0 means "the default"; the negated form also rejects NaN.
		if !(f.v > 0 && f.v <= f.max) {
			return fmt.Errorf("%s: must be > 0 and <= %g (0 for the default)", f.name, f.max)
		}
	}
	if !(d.MaxSafetyMargin >= d.SafetyMargin && d.MaxSafetyMargin <= 1) {
		return errors.New("max_safety_margin: must be >= safety_margin and <= 1 (0 for the default)")
	}
	if d.OutputReservation != OutputReservationMaxTokens && d.OutputReservation != OutputReservationLearned {
		return fmt.Errorf("output_reservation: must be %q or %q, got %q", OutputReservationMaxTokens, OutputReservationLearned, d.OutputReservation)
	}
	if d.OutputReservation == OutputReservationLearned && d.Protocol == OpenAI {
		return errors.New("output_reservation: learned needs a provider that counts only the output produced; OpenAI reserves max_tokens against TPM")
	}
	for _, f := range []struct{ name, v string }{
		{"prompt_cache.admission", d.PromptCache.Admission},
		{"prompt_cache.affinity", d.PromptCache.Affinity},
	} {
		if f.v != PromptCacheOn && f.v != PromptCacheOff {
			return fmt.Errorf("%s: must be %q or %q, got %q", f.name, PromptCacheOn, PromptCacheOff, f.v)
		}
	}
	for p := range Priority(NumPriorities) {
		cl := d.Classes.Get(p)
		if !(cl.Weight > 0 && cl.Weight <= 1e6) {
			return fmt.Errorf("classes.%s.weight: must be > 0 (0 for the default)", p)
		}
		if cl.MaxWait < 0 {
			return fmt.Errorf("classes.%s.max_wait: must be >= 0", p)
		}
		if !(cl.Headroom < 1) || math.IsNaN(cl.Headroom) {
			return fmt.Errorf("classes.%s.headroom: must be < 1 (negative for none, 0 for the default)", p)
		}
	}
	return nil
}

// hostPortRE is a base_url written without its scheme: a host or an
// address, a port, maybe a path (127.0.0.1:23019, localhost:8080/v1).
var hostPortRE = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]+)?(/.*)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?(/.*)?$`)

func validateBaseURL(s string) error {
	if !strings.Contains(s, "://") && hostPortRE.MatchString(s) {
		return fmt.Errorf("a URL needs its scheme: http://%s (or https://%s)", s, s)
	}
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
