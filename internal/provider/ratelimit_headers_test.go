package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseRateLimitsAnthropicCapture(t *testing.T) {
	t.Parallel()
	// §1.3 real streaming capture, Feb 2025.
	h := headers(
		"date", "Mon, 24 Feb 2025 22:25:32 GMT",
		"anthropic-ratelimit-requests-limit", "1000",
		"anthropic-ratelimit-requests-remaining", "999",
		"anthropic-ratelimit-requests-reset", "2025-02-24T22:25:30Z",
		"anthropic-ratelimit-input-tokens-limit", "80000",
		"anthropic-ratelimit-input-tokens-remaining", "78000",
		"anthropic-ratelimit-input-tokens-reset", "2025-02-24T22:25:32Z",
		"anthropic-ratelimit-output-tokens-limit", "16000",
		"anthropic-ratelimit-output-tokens-remaining", "12000",
		"anthropic-ratelimit-output-tokens-reset", "2025-02-24T22:25:47Z",
		"anthropic-ratelimit-tokens-limit", "96000",
		"anthropic-ratelimit-tokens-remaining", "90000",
		"anthropic-ratelimit-tokens-reset", "2025-02-24T22:25:32Z",
	)
	got := provider.ParseRateLimits(llm.Anthropic, h, specNow)
	require.Equal(t, provider.RateLimits{
		// The requests reset precedes the response: read as now.
		provider.DimRequests:     {Limit: 1000, Remaining: 999, Reset: specNow},
		provider.DimInputTokens:  {Limit: 80000, Remaining: 78000, Reset: specNow},
		provider.DimOutputTokens: {Limit: 16000, Remaining: 12000, Reset: at("2025-02-24T22:25:47Z")},
		provider.DimTokens:       {Limit: 96000, Remaining: 90000, Reset: specNow},
	}, got)
	_, exhausted := got.Exhausted()
	require.False(t, exhausted)
	// OpenAI's parser ignores Anthropic's headers.
	require.Empty(t, provider.ParseRateLimits(llm.OpenAI, h, specNow))
}

func TestParseRateLimitsAnthropic2024Exhausted(t *testing.T) {
	t.Parallel()
	// §1.4 2024 429 header set: requests exhausted, no retry-after.
	now := at("2024-03-26T19:59:59Z")
	h := headers(
		"anthropic-ratelimit-requests-limit", "5",
		"anthropic-ratelimit-requests-remaining", "0",
		"anthropic-ratelimit-requests-reset", "2024-03-26T20:00:00Z",
		"anthropic-ratelimit-tokens-limit", "25000",
		"anthropic-ratelimit-tokens-remaining", "16000",
		"anthropic-ratelimit-tokens-reset", "2024-03-26T20:00:00.5Z",
		"x-should-retry", "true",
	)
	got := provider.ParseRateLimits(llm.Anthropic, h, now)
	require.Len(t, got, 2)
	require.Equal(t, at("2024-03-26T20:00:00.5Z"), got[provider.DimTokens].Reset, "fractional seconds")
	reset, ok := got.Exhausted()
	require.True(t, ok)
	require.Equal(t, at("2024-03-26T20:00:00Z"), reset)
}

func TestParseRateLimitsOpenAI(t *testing.T) {
	t.Parallel()
	now := specNow
	tests := []struct {
		name string
		h    http.Header
		want provider.RateLimits
	}{
		{
			name: "real community capture",
			h: headers(
				"x-ratelimit-limit-requests", "5000",
				"x-ratelimit-limit-tokens", "160000",
				"x-ratelimit-remaining-requests", "4999",
				"x-ratelimit-remaining-tokens", "159976",
				"x-ratelimit-reset-requests", "12ms",
				"x-ratelimit-reset-tokens", "9ms",
			),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: 5000, Remaining: 4999, Reset: now.Add(12 * time.Millisecond)},
				provider.DimTokens:   {Limit: 160000, Remaining: 159976, Reset: now.Add(9 * time.Millisecond)},
			},
		},
		{
			name: "doc sample durations",
			h: headers(
				"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
				"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s",
			),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: 60, Remaining: 59, Reset: now.Add(time.Second)},
				provider.DimTokens:   {Limit: 150000, Remaining: 149984, Reset: now.Add(6 * time.Minute)},
			},
		},
		{
			name: "compound duration and zero",
			h:    headers("x-ratelimit-reset-requests", "1h2m3.5s", "x-ratelimit-reset-tokens", "0s", "x-ratelimit-remaining-tokens", "0"),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: -1, Remaining: -1, Reset: now.Add(time.Hour + 2*time.Minute + 3500*time.Millisecond)},
				provider.DimTokens:   {Limit: -1, Remaining: 0, Reset: now},
			},
		},
		{
			name: "azure integer and decimal seconds",
			h:    headers("x-ratelimit-remaining-requests", "9", "x-ratelimit-reset-requests", "10", "x-ratelimit-reset-tokens", "2.5"),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: -1, Remaining: 9, Reset: now.Add(10 * time.Second)},
				provider.DimTokens:   {Limit: -1, Remaining: -1, Reset: now.Add(2500 * time.Millisecond)},
			},
		},
		{
			name: "rfc3339 absolute and past",
			h:    headers("x-ratelimit-reset-requests", "2025-02-24T22:26:02Z", "x-ratelimit-reset-tokens", "2025-02-24T22:00:00Z"),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: -1, Remaining: -1, Reset: now.Add(30 * time.Second)},
				provider.DimTokens:   {Limit: -1, Remaining: -1, Reset: now},
			},
		},
		{
			name: "-1 sentinels and garbage are unknown",
			h: headers(
				"x-ratelimit-limit-requests", "-1", "x-ratelimit-remaining-requests", "-1", "x-ratelimit-reset-requests", "-1",
				"x-ratelimit-limit-tokens", "lots", "x-ratelimit-remaining-tokens", "12", "x-ratelimit-reset-tokens", "whenever",
			),
			want: provider.RateLimits{
				provider.DimTokens: {Limit: -1, Remaining: 12, Reset: time.Time{}},
			},
		},
		{
			name: "negative duration is now, huge is unknown",
			h:    headers("x-ratelimit-reset-requests", "-5s", "x-ratelimit-reset-tokens", "99999999999"),
			want: provider.RateLimits{
				provider.DimRequests: {Limit: -1, Remaining: -1, Reset: now},
			},
		},
		{
			name: "azure responses api zero",
			h:    headers("x-ratelimit-limit-tokens", "0", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "0"),
			want: provider.RateLimits{
				provider.DimTokens: {Limit: 0, Remaining: 0, Reset: now},
			},
		},
		{name: "no headers", h: headers(), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, provider.ParseRateLimits(llm.OpenAI, tt.h, now))
		})
	}
}

func TestRateLimitsExhausted(t *testing.T) {
	t.Parallel()
	t1, t2 := specNow.Add(time.Second), specNow.Add(5*time.Second)
	tests := []struct {
		name   string
		rl     provider.RateLimits
		want   time.Time
		wantOK bool
	}{
		{"empty", nil, time.Time{}, false},
		{"nothing exhausted", provider.RateLimits{provider.DimTokens: {Limit: 10, Remaining: 3, Reset: t2}}, time.Time{}, false},
		{"latest exhausted reset", provider.RateLimits{
			provider.DimRequests:     {Limit: 5, Remaining: 0, Reset: t1},
			provider.DimOutputTokens: {Limit: 5, Remaining: 0, Reset: t2},
			provider.DimTokens:       {Limit: 5, Remaining: 3, Reset: t2.Add(time.Hour)},
		}, t2, true},
		{"exhausted without reset", provider.RateLimits{provider.DimRequests: {Limit: 5, Remaining: 0}}, time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.rl.Exhausted()
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseRateLimits(f *testing.F) {
	f.Add("1000", "999", "2025-02-24T22:25:30Z")
	f.Add("80000", "78000", "2025-02-24T22:25:47.25Z")
	f.Add("5000", "4999", "12ms")
	f.Add("150000", "149984", "6m0s")
	f.Add("-1", "-1", "-1")
	f.Add("60", "0", "10")
	f.Add("x", "1.5", "1h2m3.5s")
	f.Add("", "", "9999999999999999999999s")
	f.Fuzz(func(t *testing.T, limit, remaining, reset string) {
		h := http.Header{}
		for _, dim := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
			h.Set("anthropic-ratelimit-"+dim+"-limit", limit)
			h.Set("anthropic-ratelimit-"+dim+"-remaining", remaining)
			h.Set("anthropic-ratelimit-"+dim+"-reset", reset)
		}
		for _, dim := range []string{"requests", "tokens"} {
			h.Set("x-ratelimit-limit-"+dim, limit)
			h.Set("x-ratelimit-remaining-"+dim, remaining)
			h.Set("x-ratelimit-reset-"+dim, reset)
		}
		for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
			rl := provider.ParseRateLimits(p, h, specNow)
			for dim, b := range rl {
				require.GreaterOrEqual(t, b.Limit, int64(-1), dim)
				require.GreaterOrEqual(t, b.Remaining, int64(-1), dim)
				require.False(t, b.Limit < 0 && b.Remaining < 0 && b.Reset.IsZero(), "empty bucket kept for %s", dim)
				if !b.Reset.IsZero() {
					require.False(t, b.Reset.Before(specNow), "reset before now for %s", dim)
				}
			}
			if reset, ok := rl.Exhausted(); ok {
				require.False(t, reset.Before(specNow))
			}
		}
	})
}
