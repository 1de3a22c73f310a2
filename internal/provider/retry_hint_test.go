package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// specNow is the Date of the spec's 2025 streaming capture.
var specNow = time.Date(2025, 2, 24, 22, 25, 32, 0, time.UTC)

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		h      http.Header
		want   time.Duration
		wantOK bool
	}{
		{"absent", headers(), 0, false},
		{"integer seconds (spec capture)", headers("retry-after", "11"), 11 * time.Second, true},
		{"decimal seconds", headers("retry-after", "1.5"), 1500 * time.Millisecond, true},
		{"leading dot", headers("retry-after", ".5"), 500 * time.Millisecond, true},
		{"spaces trimmed", headers("retry-after", " 7 "), 7 * time.Second, true},
		{"zero", headers("retry-after", "0"), 0, true},
		{"two minutes", headers("retry-after", "120"), 2 * time.Minute, true},
		{"ms wins over seconds", headers("retry-after-ms", "250.5", "retry-after", "30"), 250500 * time.Microsecond, true},
		{"ms zero", headers("retry-after-ms", "0"), 0, true},
		{"bad ms falls back", headers("retry-after-ms", "abc", "retry-after", "3"), 3 * time.Second, true},
		{"negative ms ignored", headers("retry-after-ms", "-5"), 0, false},
		{"NaN ms ignored", headers("retry-after-ms", "NaN"), 0, false},
		{"Inf ms ignored", headers("retry-after-ms", "+Inf"), 0, false},
		{"negative seconds", headers("retry-after", "-1"), 0, false},
		{"garbage", headers("retry-after", "soon"), 0, false},
		{"exponent is not delay-seconds", headers("retry-after", "1e3"), 0, false},
		{"trailing dot", headers("retry-after", "5."), 0, false},
		{"huge seconds clamped", headers("retry-after", "99999999999999999999"), provider.MaxRetryHint, true},
		{"an hour clamped", headers("retry-after", "3600"), provider.MaxRetryHint, true},
		{"huge ms clamped", headers("retry-after-ms", "1e300"), provider.MaxRetryHint, true},
		{"IMF-fixdate", headers("retry-after", "Mon, 24 Feb 2025 22:26:32 GMT"), time.Minute, true},
		{"rfc850 date", headers("retry-after", "Monday, 24-Feb-25 22:26:32 GMT"), time.Minute, true},
		{"asctime date", headers("retry-after", "Mon Feb 24 22:26:32 2025"), time.Minute, true},
		{"measured from the Date header", headers("retry-after", "Mon, 24 Feb 2025 22:26:32 GMT", "date", "Mon, 24 Feb 2025 22:26:02 GMT"), 30 * time.Second, true},
		{"bad Date header falls back to now", headers("retry-after", "Mon, 24 Feb 2025 22:26:32 GMT", "date", "yesterday"), time.Minute, true},
		{"past date is zero", headers("retry-after", "Fri, 31 Dec 1999 23:59:59 GMT"), 0, true},
		{"far future date clamped", headers("retry-after", "Fri, 31 Dec 2100 23:59:59 GMT"), provider.MaxRetryHint, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := provider.ParseRetryAfter(tt.h, specNow)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRetryHint(t *testing.T) {
	t.Parallel()
	msg := func(m string) []byte {
		return []byte(`{"error":{"message":"` + m + `","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
	}
	tests := []struct {
		name   string
		p      llm.Protocol
		h      http.Header
		body   []byte
		want   time.Duration
		wantOK bool
	}{
		{"header wins over body", llm.OpenAI, headers("retry-after", "2"), []byte(openAI429TPM), 2 * time.Second, true},
		{"openai 7.62s", llm.OpenAI, nil, []byte(openAI429TPM), 7620 * time.Millisecond, true},
		{"openai 20s", llm.OpenAI, nil, []byte(openAI429RPM), 20 * time.Second, true},
		{"openai 1.378s", llm.OpenAI, nil, msg("Limit 200000, Used 150974, Requested 53621. Please try again in 1.378s. Visit"), 1378 * time.Millisecond, true},
		{"openai 1m2.5s", llm.OpenAI, nil, msg("Please try again in 1m2.5s."), 62500 * time.Millisecond, true},
		{"openai 123ms", llm.OpenAI, nil, msg("Please try again in 123ms."), 123 * time.Millisecond, true},
		{"huge message hint clamped", llm.OpenAI, nil, msg("Please try again in 99999h."), provider.MaxRetryHint, true},
		{"overflowing message hint clamped", llm.OpenAI, nil, msg("Please try again in 99999999999999999999s."), provider.MaxRetryHint, true},
		{"gemini: longer of retryDelay and message", llm.OpenAI, nil, []byte(gemini429), 29943570175 * time.Nanosecond, true},
		{"gemini retryDelay only", llm.OpenAI, nil, []byte(gemini429Day), 1500 * time.Millisecond, true},
		{"gemini without hint", llm.OpenAI, nil, []byte(gemini429Zero), 0, false},
		{"anthropic 429 without header", llm.Anthropic, nil, []byte(anthropic429), 0, false},
		{"anthropic 429 with header", llm.Anthropic, headers("retry-after", "11"), []byte(anthropic429), 11 * time.Second, true},
		{"html body", llm.Anthropic, nil, []byte(html502), 0, false},
		{"empty body", llm.OpenAI, nil, nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.h
			if h == nil {
				h = http.Header{}
			}
			got, ok := provider.RetryHint(tt.p, h, tt.body, specNow)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestShouldRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		value string
		want  *bool
	}{
		{"true", new(true)},
		{"false", new(false)},
		{" TRUE ", new(true)},
		{"False", new(false)},
		{"1", nil},
		{"yes", nil},
		{"", nil},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.value != "" {
				h.Set("x-should-retry", tt.value)
			}
			require.Equal(t, tt.want, provider.ShouldRetry(h))
		})
	}
}

func FuzzRetryHint(f *testing.F) {
	f.Add("", "11", "", []byte(anthropic429))
	f.Add("250.5", "30", "", []byte(nil))
	f.Add("", "Mon, 24 Feb 2025 22:26:32 GMT", "Mon, 24 Feb 2025 22:26:02 GMT", []byte(nil))
	f.Add("", "Monday, 24-Feb-25 22:26:32 GMT", "", []byte(nil))
	f.Add("", "Mon Feb 24 22:26:32 2025", "", []byte(nil))
	f.Add("NaN", "-1", "", []byte(openAI429TPM))
	f.Add("", "99999999999999999999", "", []byte(gemini429))
	f.Add("", "", "", []byte(`{"error":{"message":"Please try again in 1m2.5s."}}`))
	f.Fuzz(func(t *testing.T, ms, ra, date string, body []byte) {
		h := http.Header{}
		h.Set("retry-after-ms", ms)
		h.Set("retry-after", ra)
		h.Set("date", date)
		for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
			d, ok := provider.RetryHint(p, h, body, specNow)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, provider.MaxRetryHint)
			if !ok {
				require.Zero(t, d)
			}
		}
		d, ok := provider.ParseRetryAfter(h, specNow)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, provider.MaxRetryHint)
		if !ok {
			require.Zero(t, d)
		}
	})
}
