package frontdoor_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
)

func TestCleanHeader(t *testing.T) {
	t.Parallel()
	in := http.Header{
		"Authorization":       {"Bearer client"},
		"X-Api-Key":           {"client"},
		"Api-Key":             {"client"}, // Azure-style key: leaked on the Transport path before
		"Proxy-Authorization": {"Basic x"},
		"X-Priority":          {"high"},
		"X-Sluice-Deadline":   {"5s"},
		"X-Sluice-Client":     {"app"},
		"X-Sluice-Future":     {"anything"},
		"Connection":          {"keep-alive, X-Hop"},
		"X-Hop":               {"1"},
		"Keep-Alive":          {"timeout=5"},
		"Te":                  {"trailers"},
		"Content-Length":      {"12"},
		"Accept-Encoding":     {"br"},
		"Host":                {"api.anthropic.com"},
		"Anthropic-Version":   {"2023-06-01"},
		"Anthropic-Beta":      {"tools-2024-04-04"},
		"User-Agent":          {"Anthropic/Go 1.0"},
		"X-Stainless-Timeout": {"600"},
		"x-api-key":           {"set by hand, not canonical"},
		"connection":          {"x-hop-2"},
		"X-Hop-2":             {"2"},
	}
	got := frontdoor.CleanHeader(in)
	require.Equal(t, http.Header{
		"Anthropic-Version":   {"2023-06-01"},
		"Anthropic-Beta":      {"tools-2024-04-04"},
		"User-Agent":          {"Anthropic/Go 1.0"},
		"X-Stainless-Timeout": {"600"},
	}, got)
	require.Equal(t, "client", in.Get("Api-Key"), "the client's header map is not modified")
	require.Equal(t, http.Header{}, frontdoor.CleanHeader(nil))
}

func TestSetRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hint    time.Duration
		secs    string
		millis  string
		present bool
	}{
		{hint: 0},
		{hint: -time.Second},
		{hint: 400 * time.Microsecond, secs: "1", millis: "1", present: true},
		{hint: 999 * time.Millisecond, secs: "1", millis: "999", present: true},
		{hint: time.Second, secs: "1", millis: "1000", present: true},
		// Rounded up, never down: the Transport used to round 1.5 s
		// through math.Ceil and the server through integer division; both
		// now go through here.
		{hint: 1500 * time.Millisecond, secs: "2", millis: "1500", present: true},
		{hint: 1500*time.Millisecond + 100*time.Microsecond, secs: "2", millis: "1501", present: true},
		{hint: 8 * time.Second, secs: "8", millis: "8000", present: true},
		{hint: time.Duration(1<<63 - 1), secs: "9223372037", millis: "9223372036855", present: true},
	} {
		t.Run(tc.hint.String(), func(t *testing.T) {
			t.Parallel()
			h := http.Header{"Retry-After": {"stale"}}
			frontdoor.SetRetryAfter(h, tc.hint)
			require.Equal(t, tc.secs, h.Get("Retry-After"))
			require.Equal(t, tc.millis, h.Get("Retry-After-Ms"))
			_, has := h["Retry-After"]
			require.Equal(t, tc.present, has)
		})
	}
}
