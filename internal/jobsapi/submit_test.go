package jobsapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/jobsapi"
	"github.com/sluicehq/sluice/internal/jobstore"
)

func TestSubmitBadInput(t *testing.T) {
	t.Parallel()
	s := newService(t, nil, succeed(), nil, func(c *config) { c.API.MaxBodyBytes = 4096 })
	cases := []struct {
		name, body string
		hdr        []string
		status     int
		want       string
	}{
		{"not json", `{`, nil, 400, "JSON job"},
		{"array", `[]`, nil, 400, "JSON job"},
		{"unknown field", `{"upstream":"claude","request":{},"colour":1}`, nil, 400, "colour"},
		{"two values", `{"upstream":"claude","request":` + anthropicBody + `}{}`, nil, 400, "one JSON job"},
		{"no upstream", `{"request":` + anthropicBody + `}`, nil, 400, "upstream is required"},
		{"unknown upstream", `{"upstream":"nope","request":` + anthropicBody + `}`, nil, 400, "unknown upstream"},
		{"no request", `{"upstream":"claude"}`, nil, 400, "request is required"},
		{"request not object", `{"upstream":"claude","request":"hi"}`, nil, 400, "JSON object"},
		{"request invalid for provider", `{"upstream":"claude","request":{"model":"x"}}`, nil, 400, "request"},
		{"bad priority", `{"upstream":"claude","request":` + anthropicBody + `,"priority":"urgent"}`, nil, 400, "priority"},
		{"bad deadline", `{"upstream":"claude","request":` + anthropicBody + `,"deadline":"tomorrow"}`, nil, 400, "RFC 3339"},
		{"past deadline", `{"upstream":"claude","request":` + anthropicBody + `,"deadline":"2001-01-01T00:00:00Z"}`, nil, 400, "past"},
		{"attempts", `{"upstream":"claude","request":` + anthropicBody + `,"max_attempts":1000}`, nil, 400, "max_attempts"},
		{"negative attempts", `{"upstream":"claude","request":` + anthropicBody + `,"max_attempts":-1}`, nil, 400, "max_attempts"},
		{"webhook", `{"upstream":"claude","request":` + anthropicBody + `,"webhook_url":"ftp://x"}`, nil, 400, "webhook_url"},
		{"keys differ", `{"upstream":"claude","request":` + anthropicBody + `,"idempotency_key":"a"}`, []string{"Idempotency-Key", "b"}, 400, "differ"},
		{"key too long", `{"upstream":"claude","request":` + anthropicBody + `}`, []string{"Idempotency-Key", strings.Repeat("k", 300)}, 400, "longer"},
		{"too large", `{"upstream":"claude","request":{"pad":"` + strings.Repeat("x", 5000) + `"}}`, nil, 413, "exceeds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, s.Handler(), "POST", "/v1/jobs", tc.body, tc.hdr...)
			require.Equal(t, tc.status, code, string(body))
			e := decode[jobsapi.APIError](t, body)
			require.Equal(t, "error", e.Type)
			require.Contains(t, e.Error.Message, tc.want)
		})
	}
	code, body := do(t, s.Handler(), "GET", "/v1/jobs", "")
	require.Equal(t, 200, code)
	require.Empty(t, decode[jobsapi.ListResponse](t, body).Data, "nothing was queued")
}

func TestIdempotencyNeverCallsTwice(t *testing.T) {
	t.Parallel()
	d := succeed()
	s := newService(t, nil, d, nil, nil)
	first := submit(t, s, `,"idempotency_key":"k1"`)
	code, body := do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+`}`, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, first.ID, decode[jobsapi.JobView](t, body).ID)
	await(t, s, first.ID)
	code, body = do(t, s.Handler(), "POST", "/v1/jobs", `{"upstream":"claude","request":`+anthropicBody+`,"idempotency_key":"k1"}`)
	require.Equal(t, http.StatusOK, code)
	again := decode[jobsapi.JobView](t, body)
	require.Equal(t, jobstore.StateSucceeded, again.State)
	require.NotNil(t, again.Response, "a known key answers with the stored response")
	require.Equal(t, 1, d.Calls())
}
