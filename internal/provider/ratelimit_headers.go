package provider

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// maxResetHorizon bounds a reset read from a header: anything further away
// is treated as garbage (unknown). Daily quotas reset within a day.
const maxResetHorizon = 31 * 24 * time.Hour

var anthropicDims = [...]struct {
	dim  Dimension
	name string
}{
	{DimRequests, "requests"},
	{DimTokens, "tokens"},
	{DimInputTokens, "input-tokens"},
	{DimOutputTokens, "output-tokens"},
}

var openAIDims = [...]struct {
	dim  Dimension
	name string
}{
	{DimRequests, "requests"},
	{DimTokens, "tokens"},
}

// ParseRateLimits reads the provider's rate-limit headers into one Bucket
// per dimension.
//
// Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
// output-tokens}-{limit,remaining,reset}, resets in RFC 3339 (fractional
// seconds allowed). OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,
// tokens}, resets as a Go duration ("6m0s", "9ms", "1h2m3.5s"), a bare
// number of seconds (Azure; integer or decimal) or an RFC 3339 instant.
//
// A reset in the past, or a negative duration, means now. A "-1" sentinel,
// a negative count or an unparseable value leaves that field unknown (Limit
// or Remaining -1, Reset zero); a dimension with nothing known is omitted,
// so a response without headers gives an empty (nil) RateLimits.
func ParseRateLimits(p llm.Protocol, h http.Header, now time.Time) RateLimits {
	var rl RateLimits
	add := func(dim Dimension, limit, remaining, reset string, parseReset func(string, time.Time) time.Time) {
		b := Bucket{
			Limit:     parseCount(h.Get(limit)),
			Remaining: parseCount(h.Get(remaining)),
			Reset:     parseReset(h.Get(reset), now),
		}
		if b.Limit < 0 && b.Remaining < 0 && b.Reset.IsZero() {
			return
		}
		if rl == nil {
			rl = RateLimits{}
		}
		rl[dim] = b
	}
	switch p {
	case llm.Anthropic:
		for _, d := range anthropicDims {
			pre := "anthropic-ratelimit-" + d.name
			add(d.dim, pre+"-limit", pre+"-remaining", pre+"-reset", parseInstantReset)
		}
	case llm.OpenAI:
		for _, d := range openAIDims {
			add(d.dim, "x-ratelimit-limit-"+d.name, "x-ratelimit-remaining-"+d.name,
				"x-ratelimit-reset-"+d.name, parseOpenAIReset)
		}
	}
	return rl
}

// Exhausted returns the latest reset among the dimensions with nothing
// remaining: the earliest instant every exhausted bucket is full again. It
// is the fallback wait for a 429 that carries no retry hint. It reports
// false when no dimension is known to be exhausted with a known reset.
func (r RateLimits) Exhausted() (time.Time, bool) {
	var latest time.Time
	for _, b := range r {
		if b.Remaining == 0 && !b.Reset.IsZero() && b.Reset.After(latest) {
			latest = b.Reset
		}
	}
	return latest, !latest.IsZero()
}

// parseCount reads a non-negative integer header; anything else is -1.
// Decimal values ("1000.0") are accepted and truncated.
func parseCount(v string) int64 {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return -1
		}
		return n
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f >= math.MaxInt64 {
		return -1
	}
	return int64(f)
}

// parseInstantReset reads an RFC 3339 reset; past means now.
func parseInstantReset(v string, now time.Time) time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return clampReset(t, now)
}

// parseOpenAIReset reads a reset given as a Go duration, bare seconds, or an
// RFC 3339 instant.
func parseOpenAIReset(v string, now time.Time) time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d > maxResetHorizon {
			return time.Time{}
		}
		return now.Add(max(d, 0))
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxResetHorizon.Seconds() {
			// -1 is the "unknown" sentinel; negatives and absurd values too.
			return time.Time{}
		}
		return now.Add(time.Duration(f * float64(time.Second)))
	}
	return parseInstantReset(v, now)
}

func clampReset(t, now time.Time) time.Time {
	if t.Before(now) {
		return now
	}
	if t.Sub(now) > maxResetHorizon {
		return time.Time{}
	}
	return t
}
