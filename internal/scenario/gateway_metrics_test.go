package scenario

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const exposition = `# HELP sluice_retries_total Requests put back in the queue.
# TYPE sluice_retries_total counter
sluice_retries_total{reason="overload",upstream="anthropic"} 41
sluice_retries_total{reason="transient",upstream="anthropic"} 2
sluice_retries_total{reason="overload",upstream="openai"} 3
sluice_breaker_transitions_total{to="open",upstream="anthropic"} 2
sluice_breaker_transitions_total{to="half-open",upstream="anthropic"} 2
go_goroutines 17
escaped{msg="a \"quoted\" , } value"} 1.5 1700000000000
weird{x="y"} NaN
`

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	c, err := parseMetrics(strings.NewReader(exposition))
	require.NoError(t, err)
	tests := []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"sluice_retries_total", nil, 46},
		{"sluice_retries_total", map[string]string{"upstream": "anthropic"}, 43},
		{"sluice_breaker_transitions_total", map[string]string{"to": "open"}, 2},
		{"go_goroutines", nil, 17},
		{"escaped", map[string]string{"msg": `a "quoted" , } value`}, 1.5},
		{"weird", nil, 0},
		{"absent_total", nil, 0},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, c.sum(tc.name, tc.match), "%s %v", tc.name, tc.match)
	}
}

func TestParseMetricsRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"novalue", `m{a="b"}`, `m{a=b} 1`, `m{a="b} 1`, "m abc", "m 1 2 3"} {
		_, err := parseMetrics(strings.NewReader(in))
		require.Error(t, err, in)
		require.ErrorContains(t, err, "line 1")
	}
}

// FuzzParseMetrics: any text parses or fails with an error, never panics.
func FuzzParseMetrics(f *testing.F) {
	f.Add(exposition)
	for _, s := range []string{"", "#", "m 1", `m{} 1`, `m{a="\"} 1`, `{a="b"} 1`, "m{a=\"b\",} 2 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseMetrics(strings.NewReader(s))
		if err == nil {
			for name := range c {
				_ = c.sum(name, nil)
			}
		}
	})
}
