package upstream_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func minimal() upstream.Config {
	return upstream.Config{Name: "a", Protocol: upstream.Anthropic}
}

func TestWithDefaultsBalanced(t *testing.T) {
	t.Parallel()
	d := minimal().WithDefaults()
	require.Equal(t, upstream.Balanced, d.Profile)
	require.Equal(t, upstream.AnthropicBaseURLDefault, d.BaseURL)
	require.Equal(t, upstream.Limits{MaxConcurrency: 64}, d.Limits)
	require.Equal(t, 4, d.MinConcurrency)
	require.Equal(t, 5.0, d.BurstSeconds)
	require.Equal(t, 0.98, d.SafetyMargin)
	require.Equal(t, 0.995, d.MaxSafetyMargin, "adaptive: narrow while no 429 is seen")
	require.Equal(t, upstream.OutputReservationMaxTokens, d.OutputReservation)
	chosen := upstream.Config{Name: "a", Protocol: upstream.Anthropic, APIKey: "k", SafetyMargin: 0.9}.WithDefaults()
	require.Equal(t, 0.9, chosen.MaxSafetyMargin, "a margin the user chose stays fixed")
	require.Equal(t, 100*time.Millisecond, d.JitterAllowance)
	require.Equal(t, 10*time.Minute, d.RequestTimeout)
	require.Equal(t, time.Minute, d.HeadroomWindow)
	require.Equal(t, upstream.Retry{BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, MaxAttempts: 4, BudgetRatio: 0.2, BudgetMin: 3}, d.Retry)
	require.Equal(t, upstream.Breaker{Window: 30 * time.Second, MinRequests: 10, FailureRatio: 0.5, ConsecutiveFailures: 5, OpenTimeout: 3 * time.Second, HalfOpenProbes: 3}, d.Breaker)
	require.Equal(t, upstream.Classes{
		Critical: upstream.Class{Weight: 8, MaxWait: 30 * time.Second, Headroom: 0},
		High:     upstream.Class{Weight: 4, MaxWait: time.Minute, Headroom: 0.10},
		Normal:   upstream.Class{Weight: 2, MaxWait: 5 * time.Minute, Headroom: 0.20},
		Low:      upstream.Class{Weight: 1, MaxWait: 30 * time.Minute, Headroom: 0.20},
	}, d.Classes)
	require.Equal(t, d, d.WithDefaults(), "idempotent")
	require.Equal(t, d, upstream.Config{Name: "a", Protocol: upstream.Anthropic, Profile: upstream.Balanced}.WithDefaults())
	require.Equal(t, upstream.OpenAIBaseURLDefault, upstream.Config{Protocol: upstream.OpenAI}.WithDefaults().BaseURL)
	require.Equal(t, 2, upstream.Config{Limits: upstream.Limits{MaxConcurrency: 2}}.WithDefaults().MinConcurrency)
}

func TestProfiles(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		cfg   upstream.Config
		check func(t *testing.T, d upstream.Config)
	}{
		{"latency presets", upstream.Config{Profile: upstream.Latency}, func(t *testing.T, d upstream.Config) {
			require.Equal(t, 16.0, d.Classes.Critical.Weight)
			require.Equal(t, 10*time.Second, d.Classes.Critical.MaxWait)
			require.Equal(t, 0.30, d.Classes.Low.Headroom)
			require.Equal(t, upstream.Retry{BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second, MaxAttempts: 3, BudgetRatio: 0.2, BudgetMin: 3}, d.Retry)
		}},
		{"throughput presets", upstream.Config{Profile: upstream.Throughput}, func(t *testing.T, d upstream.Config) {
			require.Equal(t, 8.0, d.Classes.Critical.Weight, "weights stay balanced")
			require.Equal(t, 2*time.Hour, d.Classes.Low.MaxWait)
			require.Equal(t, 0.20, d.Classes.Normal.Headroom)
			require.Equal(t, 8, d.Retry.MaxAttempts)
			require.Equal(t, 30*time.Second, d.Retry.MaxDelay)
		}},
		{"an explicit field wins", upstream.Config{Profile: upstream.Latency,
			Retry:   upstream.Retry{MaxAttempts: 7},
			Classes: upstream.Classes{Critical: upstream.Class{MaxWait: time.Minute}, Low: upstream.Class{Headroom: -1}}},
			func(t *testing.T, d upstream.Config) {
				require.Equal(t, 7, d.Retry.MaxAttempts)
				require.Equal(t, 200*time.Millisecond, d.Retry.BaseDelay)
				require.Equal(t, time.Minute, d.Classes.Critical.MaxWait)
				require.Equal(t, 16.0, d.Classes.Critical.Weight)
				require.Equal(t, -1.0, d.Classes.Low.Headroom, "negative: none, kept")
			}},
		{"an explicit base_delay above the profile's cap raises it", upstream.Config{Profile: upstream.Latency, Retry: upstream.Retry{BaseDelay: 5 * time.Second}},
			func(t *testing.T, d upstream.Config) { require.Equal(t, 5*time.Second, d.Retry.MaxDelay) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Name, tt.cfg.Protocol = "a", upstream.Anthropic
			d := tt.cfg.WithDefaults()
			require.NoError(t, d.Validate())
			require.NoError(t, tt.cfg.Validate())
			tt.check(t, d)
			require.Equal(t, d, d.WithDefaults(), "idempotent")
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mod  func(*upstream.Config)
		want string
	}{
		{func(c *upstream.Config) { c.Profile = "fast" }, `profile: unknown profile "fast"`},
		{func(c *upstream.Config) { c.Name = "" }, "name: "},
		{func(c *upstream.Config) { c.Name = "Big" }, "name: "},
		{func(c *upstream.Config) { c.Protocol = "gemini" }, "protocol: "},
		{func(c *upstream.Config) { c.BaseURL = "api.anthropic.com" }, "base_url: "},
		{func(c *upstream.Config) { c.BaseURL = "https://u:p@x" }, "base_url: must not contain credentials"},
		{func(c *upstream.Config) { c.Limits.RequestsPerMinute = -1 }, "limits.requests_per_minute: must be >= 0"},
		{func(c *upstream.Config) { c.Limits.MaxConcurrency = -1 }, "limits.max_concurrency: must be >= 0"},
		{func(c *upstream.Config) { c.MinConcurrency = 100; c.Limits.MaxConcurrency = 10 }, "min_concurrency: must be <= limits.max_concurrency"},
		{func(c *upstream.Config) { c.SafetyMargin = 1.5 }, "safety_margin: must be > 0 and <= 1"},
		{func(c *upstream.Config) { c.BurstSeconds = -1 }, "burst_seconds: "},
		{func(c *upstream.Config) { c.SafetyMargin, c.MaxSafetyMargin = 0.98, 0.9 }, "max_safety_margin: must be >= safety_margin"},
		{func(c *upstream.Config) { c.OutputReservation = "some" }, "output_reservation: must be "},
		{func(c *upstream.Config) { c.Protocol, c.OutputReservation = upstream.OpenAI, "learned" }, "output_reservation: learned needs"},
		{func(c *upstream.Config) { c.JitterAllowance = 2 * time.Minute }, "jitter_allowance: must be <= 1m"},
		{func(c *upstream.Config) { c.RequestTimeout = -time.Second }, "request_timeout: must be >= 0"},
		{func(c *upstream.Config) { c.Retry.MaxDelay = time.Millisecond }, "retry.base_delay: must be <= retry.max_delay"},
		{func(c *upstream.Config) { c.Retry.MaxAttempts = -1 }, "retry.max_attempts: must be >= 0"},
		{func(c *upstream.Config) { c.Retry.BudgetRatio = 2 }, "retry.budget_ratio: "},
		{func(c *upstream.Config) { c.Breaker.FailureRatio = 2 }, "breaker.failure_ratio: "},
		{func(c *upstream.Config) { c.Breaker.OpenTimeout = -1 }, "breaker.open_timeout: must be >= 0"},
		{func(c *upstream.Config) { c.Classes.Low.Weight = -1 }, "classes.low.weight: must be > 0"},
		{func(c *upstream.Config) { c.Classes.High.MaxWait = -1 }, "classes.high.max_wait: must be >= 0"},
		{func(c *upstream.Config) { c.Classes.Normal.Headroom = 1 }, "classes.normal.headroom: must be < 1"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			c := minimal()
			tt.mod(&c)
			err := c.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, err.Error()[:len(tt.want)], tt.want, "the message starts with the field")
		})
	}
	require.NoError(t, minimal().Validate())
}

// TestYAMLTags: the YAML documented in docs/config.md decodes into every
// field.
func TestYAMLTags(t *testing.T) {
	t.Parallel()
	const doc = `
name: anthropic
protocol: anthropic
base_url: https://api.anthropic.com
api_key: sk
profile: latency
limits: {requests_per_minute: 1, input_tokens_per_minute: 2, output_tokens_per_minute: 3, tokens_per_minute: 4, max_concurrency: 5, count_tokens_per_minute: 18}
prompt_cache: {admission: off, affinity: off, prefixes: 19}
burst_seconds: 6
safety_margin: 0.9
max_safety_margin: 0.95
output_reservation: learned
jitter_allowance: 7ms
min_concurrency: 2
request_timeout: 8s
headroom_window: 9s
burst_room: 0.4
burst_memory: 16s
abandoned_stream_drain: 17s
key_probe_interval: 15s
response_retention: 20h
flex: {min_slack: 20s, timeout: 21s}
retry: {base_delay: 1s, max_delay: 2s, max_attempts: 3, budget_ratio: 0.4, budget_min: 5}
breaker: {window: 10s, min_requests: 11, failure_ratio: 0.6, consecutive_failures: 12, open_timeout: 13s, half_open_probes: 14}
classes:
  critical: {weight: 1, max_wait: 1s, headroom: -1}
  high: {weight: 2, max_wait: 2s, headroom: 0.1}
  normal: {weight: 3, max_wait: 3s, headroom: 0.2}
  low: {weight: 4, max_wait: 4s, headroom: 0.3}
`
	dec := yaml.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.KnownFields(true)
	var c upstream.Config
	require.NoError(t, dec.Decode(&c))
	require.NoError(t, c.Validate())
	require.Equal(t, c, c.WithDefaults(), "every field set: nothing to default")
	require.Equal(t, 13*time.Second, c.Breaker.OpenTimeout)
	require.Equal(t, 4*time.Second, c.Classes.Low.MaxWait)

	var bad upstream.Config
	dec = yaml.NewDecoder(bytes.NewReader([]byte("classes: {urgent: {weight: 1}}")))
	dec.KnownFields(true)
	require.ErrorContains(t, dec.Decode(&bad), "urgent")
}
