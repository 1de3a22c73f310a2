package admit

import (
	"errors"
	"fmt"
)

// ClientBurstSecondsDefault is how many seconds of a client's rate its
// buckets hold when full: a whole minute, so that "30 requests per
// minute" means what it says to a user and what the providers' own
// per-minute limits mean (30 at once after a quiet minute, then one every
// 2 s), not strictly one every 2 s.
const ClientBurstSecondsDefault = 60

// LimitValues are one set of per-minute limits and a concurrency cap; zero
// means no limit in that dimension.
type LimitValues struct {
	// RequestsPerMinute caps requests sent per minute. Defaults to no
	// limit.
	RequestsPerMinute float64 `yaml:"requests_per_minute" json:"requests_per_minute,omitempty"`
	// TokensPerMinute caps input+output tokens per minute, charged at the
	// request's estimate (input estimate + max_tokens) before sending and
	// corrected to the usage the answer reports. Defaults to no limit.
	TokensPerMinute float64 `yaml:"tokens_per_minute" json:"tokens_per_minute,omitempty"`
	// MaxConcurrency caps the client's requests in flight at once.
	// Defaults to no limit.
	MaxConcurrency int `yaml:"max_concurrency" json:"max_concurrency,omitempty"`
	// BurstSeconds is how many seconds of the rates the client's buckets
	// hold when full, in (0, 60]. Defaults to ClientBurstSecondsDefault
	// (60: a whole minute).
	BurstSeconds float64 `yaml:"burst_seconds" json:"burst_seconds,omitempty"`
}

// ClientLimits are a client's limits on each upstream: LimitValues apply
// to every upstream (each with its own buckets), and Upstreams overrides
// them field by field for the upstreams it names.
type ClientLimits struct {
	LimitValues `yaml:",inline"`
	// Upstreams overrides the limits for one upstream, by upstream name;
	// a zero field keeps the client-wide value. Defaults to none.
	Upstreams map[string]LimitValues `yaml:"upstreams" json:"upstreams,omitempty"`
}

// For returns the limits that apply on upstream.
func (l ClientLimits) For(upstream string) LimitValues {
	v := l.LimitValues
	if o, ok := l.Upstreams[upstream]; ok {
		if o.RequestsPerMinute != 0 {
			v.RequestsPerMinute = o.RequestsPerMinute
		}
		if o.TokensPerMinute != 0 {
			v.TokensPerMinute = o.TokensPerMinute
		}
		if o.MaxConcurrency != 0 {
			v.MaxConcurrency = o.MaxConcurrency
		}
		if o.BurstSeconds != 0 {
			v.BurstSeconds = o.BurstSeconds
		}
	}
	return v
}

// None reports whether v limits nothing.
func (v LimitValues) None() bool {
	return v.RequestsPerMinute == 0 && v.TokensPerMinute == 0 && v.MaxConcurrency == 0
}

// burstSeconds is v's BurstSeconds, defaulted.
func (v LimitValues) burstSeconds() float64 {
	if v.BurstSeconds > 0 {
		return v.BurstSeconds
	}
	return ClientBurstSecondsDefault
}

func (v LimitValues) validate() error {
	switch {
	case v.RequestsPerMinute < 0:
		return errors.New("requests_per_minute: must be >= 0")
	case v.TokensPerMinute < 0:
		return errors.New("tokens_per_minute: must be >= 0")
	case v.MaxConcurrency < 0:
		return errors.New("max_concurrency: must be >= 0")
	case v.BurstSeconds < 0 || v.BurstSeconds > 60:
		return errors.New("burst_seconds: must be in (0, 60]")
	}
	return nil
}

// Validate checks the values and that every override names one of
// upstreams; its errors name the field (limits.upstreams.NAME.FIELD).
func (l ClientLimits) Validate(upstreams map[string]bool) error {
	if err := l.validate(); err != nil {
		return err
	}
	for name, v := range l.Upstreams {
		if !upstreams[name] {
			return fmt.Errorf("upstreams.%s: no upstream is named %q", name, name)
		}
		if err := v.validate(); err != nil {
			return fmt.Errorf("upstreams.%s.%w", name, err)
		}
	}
	return nil
}
