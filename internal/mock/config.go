package mock

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/clock"
)

// Defaults for Config fields.
const (
	// ListenDefault is the address Start listens on when Config.Listen is empty.
	ListenDefault = "127.0.0.1:9090"
	// BurstSecondsDefault makes a bucket as deep as a full minute of refill.
	BurstSecondsDefault = 60.0
	// MaxBodyBytesDefault is Anthropic's documented 32 MB request limit.
	MaxBodyBytesDefault int64 = 32 << 20
	// OrgIDDefault is the organization id the mock reports.
	OrgIDDefault = "5e4c6a1e-7d3b-4f0a-9c1e-2b8d5f6a7c90"
	// DefaultMaxTokensDefault is the OpenAI output reservation when a request
	// sets neither max_completion_tokens nor max_tokens.
	DefaultMaxTokensDefault int64 = 4096
	// OutputTokensMinDefault is the smallest generated reply, in tokens.
	OutputTokensMinDefault int64 = 1
	// HTMLErrorRateDefault is the share of injected 502/503 rendered as an
	// edge proxy's HTML page.
	HTMLErrorRateDefault = 0.5
	// FlexLatencyFactorDefault is how much slower an OpenAI flex request is
	// served ("slower response times").
	FlexLatencyFactorDefault = 2.0
)

// OTPM accounting modes (spec §1.2: the 2025 and 2026 documented semantics).
const (
	// OTPMReserve reserves max_tokens at admission and refunds the unused
	// part when the reply ends (2025 documentation).
	OTPMReserve = "reserve_max_tokens"
	// OTPMRealtime charges output tokens as they are produced; admission
	// only requires the output bucket to be above zero (2026 documentation).
	OTPMRealtime = "realtime"
)

// Config configures a mock provider. The zero value is usable: unlimited
// quotas, no faults, no latency, listening on ListenDefault.
type Config struct {
	// Listen is the TCP address Start listens on; "127.0.0.1:0" picks a free
	// port. Defaults to ListenDefault.
	Listen string `yaml:"listen"`
	// Preset names a limit table from Preset (e.g. "anthropic-tier1"); the
	// non-zero fields of Limits override it. Defaults to none.
	Preset string `yaml:"preset"`
	// Limits are the per-API-key per-minute quotas. Defaults to unlimited.
	Limits Limits `yaml:"limits"`
	// BurstSeconds is how many seconds of refill a bucket holds: 60 lets a
	// full minute's limit through at once, 1 enforces the limit per second.
	// Defaults to BurstSecondsDefault.
	BurstSeconds float64 `yaml:"burst_seconds"`
	// OTPMMode is OTPMReserve or OTPMRealtime. Defaults to OTPMReserve.
	OTPMMode string `yaml:"otpm_mode"`
	// CountRejected makes a rate-limited (429) request still cost one request
	// token. Defaults to true.
	CountRejected *bool `yaml:"count_rejected"`
	// OrgID is the organization id in headers and 429 messages. Defaults to
	// OrgIDDefault.
	OrgID string `yaml:"org_id"`
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	// Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// DefaultMaxTokens is the OpenAI per-choice output reservation when the
	// request names none. Defaults to DefaultMaxTokensDefault.
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
	// OutputTokens bounds the generated reply length. Defaults to
	// OutputTokensMinDefault up to the request's max_tokens.
	OutputTokens OutputRange `yaml:"output_tokens"`
	// TTFT is the time to the first output token. Defaults to 0.
	TTFT time.Duration `yaml:"ttft"`
	// PerToken is the time to produce each further output token. Defaults to 0.
	PerToken time.Duration `yaml:"per_token"`
	// FlexLatencyFactor multiplies TTFT and PerToken for OpenAI requests
	// served in the flex tier. Defaults to FlexLatencyFactorDefault.
	FlexLatencyFactor float64 `yaml:"flex_latency_factor"`
	// BackgroundQueue is how long an OpenAI background response stays
	// queued before it starts. Defaults to 0.
	BackgroundQueue time.Duration `yaml:"background_queue"`
	// Seed makes generated replies and injected faults reproducible.
	// Defaults to 0.
	Seed uint64 `yaml:"seed"`
	// Faults are the injected failures at start; SetFaults changes them at
	// run time. Defaults to none.
	Faults Faults `yaml:"faults"`
	// Batch simulates the Anthropic Message Batches and OpenAI Batch APIs.
	// Defaults to BatchConfig's defaults.
	Batch BatchConfig `yaml:"batch"`
	// Accounts are account-level buckets shared by listed keys, on top of
	// each key's own (Limits). Defaults to none.
	Accounts map[string]Account `yaml:"accounts"`
	// Clock is the time source for buckets, latency and outages. Defaults to
	// the wall clock.
	Clock clock.Clock `yaml:"-"`
}

// Limits are per-minute quotas; 0 means unlimited. Anthropic's model
// endpoint uses RPM, ITPM and OTPM, its count_tokens CountTokensRPM alone;
// OpenAI endpoints (chat, responses, embeddings) share RPM and TPM, and
// its responses/input_tokens uses CountTokensRPM alone.
type Limits struct {
	// RPM is requests per minute. Defaults to 0 (unlimited).
	RPM int64 `yaml:"rpm"`
	// ITPM is Anthropic input tokens per minute. Defaults to 0 (unlimited).
	ITPM int64 `yaml:"itpm"`
	// OTPM is Anthropic output tokens per minute. Defaults to 0 (unlimited).
	OTPM int64 `yaml:"otpm"`
	// TPM is OpenAI combined tokens per minute. Defaults to 0 (unlimited).
	TPM int64 `yaml:"tpm"`
	// CountTokensRPM is the token-counting requests per minute (Anthropic
	// count_tokens, OpenAI responses/input_tokens), a bucket of its own on
	// each key. Defaults to 0 (unlimited).
	CountTokensRPM int64 `yaml:"count_tokens_rpm"`
}

// OutputRange bounds the generated output length in tokens. The length is
// chosen deterministically from the seed and the request body: uniformly
// in [Min, Max], or, with StdDev set, from a normal distribution clamped
// to that range.
type OutputRange struct {
	// Min is the shortest reply. Defaults to OutputTokensMinDefault.
	Min int64 `yaml:"min"`
	// Max is the longest reply, further capped by the request's max_tokens;
	// 0 means the request's max_tokens. Defaults to 0.
	Max int64 `yaml:"max"`
	// Mean is the normal distribution's mean when StdDev is set; 0 means
	// the middle of [Min, Max] (Max or, when 0, the request's max_tokens).
	// Defaults to 0.
	Mean float64 `yaml:"mean"`
	// StdDev, when positive, draws the length from N(Mean, StdDev),
	// rounded and clamped to [Min, Max] (so a request's max_tokens
	// truncates the tail, as a real model's reply is cut off). Defaults to
	// 0 (uniform).
	StdDev float64 `yaml:"stddev"`
}

// Faults are injected failures. Rates are probabilities in [0, 1] drawn per
// request from a generator seeded by Config.Seed. Faults other than
// mid-stream errors and slowness are decided before quota admission, so they
// cost no quota.
type Faults struct {
	// OverloadRate is the probability of an overload answer: Anthropic 529
	// overloaded_error, OpenAI 503 "The engine is currently overloaded".
	// Defaults to 0.
	OverloadRate float64 `yaml:"overload_rate"`
	// OverloadBurst is the mean length of a correlated overload storm
	// (exponentially distributed); every request during a storm is
	// overloaded. 0 disables storms. Defaults to 0.
	OverloadBurst time.Duration `yaml:"overload_burst"`
	// OverloadGap is the mean calm time between storms. Defaults to 0
	// (storms disabled unless both are set).
	OverloadGap time.Duration `yaml:"overload_gap"`
	// OverloadRetryAfter, when positive, adds retry-after (whole seconds,
	// rounded up) to overload answers. Defaults to 0 (no header).
	OverloadRetryAfter time.Duration `yaml:"overload_retry_after"`
	// ShouldRetry adds x-should-retry to injected errors: true on retryable
	// ones, false on spend-cap 429s. Defaults to false (header absent).
	ShouldRetry bool `yaml:"should_retry"`
	// Outages are scheduled windows, relative to Start, in which every
	// request fails. Defaults to none.
	Outages []Outage `yaml:"outages"`
	// ErrorRate is the probability of a 5xx server error, with the status
	// drawn uniformly from ErrorStatuses. Defaults to 0.
	ErrorRate float64 `yaml:"error_rate"`
	// ErrorStatuses are the statuses ErrorRate draws from. Defaults to
	// [500, 502, 503, 504].
	ErrorStatuses []int `yaml:"error_statuses"`
	// HTMLErrorRate is the share of injected 502/503 answers sent as an edge
	// proxy's HTML page instead of JSON. Defaults to HTMLErrorRateDefault;
	// set a negative value for never.
	HTMLErrorRate float64 `yaml:"html_error_rate"`
	// StreamErrorRate is the probability that a stream fails with an
	// overloaded error event after StreamErrorAfter content deltas.
	// Defaults to 0.
	StreamErrorRate float64 `yaml:"stream_error_rate"`
	// StreamErrorAfter is the number of content deltas sent before an
	// injected stream error. Defaults to 0.
	StreamErrorAfter int `yaml:"stream_error_after"`
	// ResetRate is the probability that the connection is closed with a TCP
	// reset instead of an answer. Defaults to 0.
	ResetRate float64 `yaml:"reset_rate"`
	// SlowRate is the probability that a reply is delayed by SlowExtra
	// before its first token. Defaults to 0.
	SlowRate float64 `yaml:"slow_rate"`
	// SlowExtra is the added latency of a slow reply. Defaults to 0.
	SlowExtra time.Duration `yaml:"slow_extra"`
	// SpendCap answers every request with the terminal spend-cap 429
	// (Anthropic enforced_spend_limit_reached, OpenAI insufficient_quota).
	// Defaults to false.
	SpendCap bool `yaml:"spend_cap"`
	// FlexUnavailableRate is the probability that an OpenAI request served
	// in the flex tier is refused with 429 resource_unavailable ("Flex
	// processing may sometimes lack sufficient resources"); it costs no
	// quota. Defaults to 0.
	FlexUnavailableRate float64 `yaml:"flex_unavailable_rate"`
}

// Outage is a window in which every request fails with Status.
type Outage struct {
	// Start is the offset from the server's Start. Defaults to 0.
	Start time.Duration `yaml:"start"`
	// Duration is the window's length; it must be positive.
	Duration time.Duration `yaml:"duration"`
	// Status is the HTTP status returned: 529 (overload; OpenAI gets 503),
	// 500, 502, 503 or 504. Defaults to 529.
	Status int `yaml:"status"`
}

// OutageStatusDefault is the status of an Outage that names none.
const OutageStatusDefault = 529

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.Listen = cmp.Or(c.Listen, ListenDefault)
	c.BurstSeconds = cmp.Or(c.BurstSeconds, BurstSecondsDefault)
	c.OTPMMode = cmp.Or(c.OTPMMode, OTPMReserve)
	if c.CountRejected == nil {
		t := true
		c.CountRejected = &t
	}
	c.OrgID = cmp.Or(c.OrgID, OrgIDDefault)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, MaxBodyBytesDefault)
	c.DefaultMaxTokens = cmp.Or(c.DefaultMaxTokens, DefaultMaxTokensDefault)
	c.OutputTokens.Min = cmp.Or(c.OutputTokens.Min, OutputTokensMinDefault)
	c.FlexLatencyFactor = cmp.Or(c.FlexLatencyFactor, FlexLatencyFactorDefault)
	c.Faults = c.Faults.WithDefaults()
	c.Batch = c.Batch.WithDefaults()
	c.Clock = clock.Or(c.Clock)
	return c
}

// WithDefaults returns a copy of f with every unset field given its default.
func (f Faults) WithDefaults() Faults {
	if len(f.ErrorStatuses) == 0 {
		f.ErrorStatuses = []int{500, 502, 503, 504}
	} else {
		f.ErrorStatuses = append([]int(nil), f.ErrorStatuses...)
	}
	f.HTMLErrorRate = cmp.Or(f.HTMLErrorRate, HTMLErrorRateDefault)
	f.Outages = append([]Outage(nil), f.Outages...)
	for i := range f.Outages {
		f.Outages[i].Status = cmp.Or(f.Outages[i].Status, OutageStatusDefault)
	}
	return f
}

func (c Config) validate() error {
	var errs []error
	if c.Preset != "" {
		if _, err := Preset(c.Preset); err != nil {
			errs = append(errs, fmt.Errorf("preset: %w", err))
		}
	}
	for name, v := range map[string]int64{"limits.rpm": c.Limits.RPM, "limits.itpm": c.Limits.ITPM,
		"limits.otpm": c.Limits.OTPM, "limits.tpm": c.Limits.TPM, "limits.count_tokens_rpm": c.Limits.CountTokensRPM} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0 (0 = unlimited), got %d", name, v))
		}
	}
	if c.BurstSeconds <= 0 || c.BurstSeconds > 3600 {
		errs = append(errs, fmt.Errorf("burst_seconds must be in (0, 3600], got %g", c.BurstSeconds))
	} else if l := c.limits(); l.RPM > 0 && float64(l.RPM)*c.BurstSeconds/60 < 1 {
		// A request bucket shallower than one request never admits one:
		// every request would get 429, forever.
		errs = append(errs, fmt.Errorf("burst_seconds %g holds %.2f requests at rpm %d, so every request would get 429: use at least %g",
			c.BurstSeconds, float64(l.RPM)*c.BurstSeconds/60, l.RPM, math.Ceil(60/float64(l.RPM)*10)/10))
	}
	if c.OTPMMode != OTPMReserve && c.OTPMMode != OTPMRealtime {
		errs = append(errs, fmt.Errorf("otpm_mode must be %q or %q, got %q", OTPMReserve, OTPMRealtime, c.OTPMMode))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max_body_bytes must be > 0, got %d", c.MaxBodyBytes))
	}
	if c.DefaultMaxTokens < 0 {
		errs = append(errs, fmt.Errorf("default_max_tokens must be > 0, got %d", c.DefaultMaxTokens))
	}
	if !(c.OutputTokens.Mean >= 0 && c.OutputTokens.StdDev >= 0) || math.IsInf(c.OutputTokens.Mean+c.OutputTokens.StdDev, 0) {
		errs = append(errs, fmt.Errorf("output_tokens.mean and output_tokens.stddev must be finite and >= 0, got %g and %g",
			c.OutputTokens.Mean, c.OutputTokens.StdDev))
	}
	if c.OutputTokens.Min < 0 || c.OutputTokens.Max < 0 {
		errs = append(errs, fmt.Errorf("output_tokens.min and output_tokens.max must be >= 0, got %d and %d",
			c.OutputTokens.Min, c.OutputTokens.Max))
	} else if c.OutputTokens.Max != 0 && c.OutputTokens.Max < c.OutputTokens.Min {
		errs = append(errs, fmt.Errorf("output_tokens.max (%d) must be >= output_tokens.min (%d)",
			c.OutputTokens.Max, c.OutputTokens.Min))
	}
	if c.TTFT < 0 || c.PerToken < 0 {
		errs = append(errs, fmt.Errorf("ttft and per_token must be >= 0, got %v and %v", c.TTFT, c.PerToken))
	}
	if !(c.FlexLatencyFactor >= 1) || math.IsInf(c.FlexLatencyFactor, 0) {
		errs = append(errs, fmt.Errorf("flex_latency_factor must be finite and >= 1, got %g", c.FlexLatencyFactor))
	}
	if c.BackgroundQueue < 0 {
		errs = append(errs, fmt.Errorf("background_queue must be >= 0, got %v", c.BackgroundQueue))
	}
	if err := c.Faults.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Batch.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateAccounts(c.Accounts); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (f Faults) validate() error {
	var errs []error
	for name, p := range map[string]float64{"faults.overload_rate": f.OverloadRate, "faults.error_rate": f.ErrorRate,
		"faults.stream_error_rate": f.StreamErrorRate, "faults.reset_rate": f.ResetRate, "faults.slow_rate": f.SlowRate,
		"faults.flex_unavailable_rate": f.FlexUnavailableRate} {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s must be in [0, 1], got %g", name, p))
		}
	}
	if f.HTMLErrorRate > 1 {
		errs = append(errs, fmt.Errorf("faults.html_error_rate must be <= 1, got %g", f.HTMLErrorRate))
	}
	if f.OverloadBurst < 0 || f.OverloadGap < 0 || f.OverloadRetryAfter < 0 || f.SlowExtra < 0 {
		errs = append(errs, errors.New("faults.overload_burst, overload_gap, overload_retry_after and slow_extra must be >= 0"))
	}
	if (f.OverloadBurst > 0) != (f.OverloadGap > 0) {
		errs = append(errs, errors.New("faults.overload_burst and faults.overload_gap must be set together"))
	}
	if f.StreamErrorAfter < 0 {
		errs = append(errs, fmt.Errorf("faults.stream_error_after must be >= 0, got %d", f.StreamErrorAfter))
	}
	for _, s := range f.ErrorStatuses {
		if s < 500 || s > 599 {
			errs = append(errs, fmt.Errorf("faults.error_statuses must be 5xx, got %d", s))
		}
	}
	for i, o := range f.Outages {
		if o.Start < 0 || o.Duration <= 0 {
			errs = append(errs, fmt.Errorf("faults.outages[%d]: start must be >= 0 and duration > 0, got %v+%v", i, o.Start, o.Duration))
		}
		if o.Status < 500 || o.Status > 599 {
			errs = append(errs, fmt.Errorf("faults.outages[%d].status must be 5xx, got %d", i, o.Status))
		}
	}
	return errors.Join(errs...)
}

// limits returns the effective limits: the preset, overridden by any
// non-zero field of c.Limits.
func (c Config) limits() Limits {
	l, _ := Preset(c.Preset) // validated; "" yields zero limits
	l.RPM = cmp.Or(c.Limits.RPM, l.RPM)
	l.ITPM = cmp.Or(c.Limits.ITPM, l.ITPM)
	l.OTPM = cmp.Or(c.Limits.OTPM, l.OTPM)
	l.TPM = cmp.Or(c.Limits.TPM, l.TPM)
	l.CountTokensRPM = cmp.Or(c.Limits.CountTokensRPM, l.CountTokensRPM)
	return l
}

// LoadConfig reads a YAML config file. Unknown fields are rejected, and the
// result is validated (with defaults applied) so errors name the bad field.
// The returned Config is not defaulted, so command-line flags can still
// override it before New.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading mock config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parsing mock config %s: %w", path, err)
	}
	if err := cfg.WithDefaults().validate(); err != nil {
		return Config{}, fmt.Errorf("mock config %s: %w", path, err)
	}
	return cfg, nil
}
