package frontdoor_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestRender(t *testing.T) {
	t.Parallel()
	giveUp := &dispatch.Error{Reason: dispatch.ErrRetriesExhausted, Status: 529, Type: "overloaded_error", Message: "upstream overloaded",
		RetryAfter: 1500 * time.Millisecond, Attempts: 3, QueueWait: 2500 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		p      llm.Protocol
		err    error
		status int
		header http.Header
		body   string
	}{
		{name: "anthropic give-up", p: llm.Anthropic, err: giveUp, status: 529,
			header: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"2"}, "Retry-After-Ms": {"1500"}, "X-Should-Retry": {"false"},
				"Request-Id": {"req_1"}, "X-Sluice-Request-Id": {"req_1"}, "X-Sluice-Queue-Ms": {"2500"}, "X-Sluice-Attempts": {"3"}, "Content-Length": {"101"}},
			body: `{"type":"error","error":{"type":"overloaded_error","message":"upstream overloaded"},"request_id":"req_1"}`},
		{name: "openai shed", p: llm.OpenAI, err: &dispatch.Error{Reason: dispatch.ErrShed, Status: 429, Type: "rate_limit_error", Message: "shed", RetryAfter: time.Second},
			status: 429,
			header: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}, "Retry-After-Ms": {"1000"}, "X-Should-Retry": {"false"},
				"X-Request-Id": {"req_1"}, "X-Sluice-Request-Id": {"req_1"}, "X-Sluice-Queue-Ms": {"0"}, "X-Sluice-Attempts": {"0"}, "Content-Length": {"94"}},
			body: `{"error":{"message":"shed","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "request error", p: llm.Anthropic, err: &provider.RequestError{Status: 400, Type: "invalid_request_error", Message: "max_tokens: Field required"},
			status: 400,
			header: http.Header{"Content-Type": {"application/json"}, "X-Should-Retry": {"false"},
				"Request-Id": {"req_1"}, "X-Sluice-Request-Id": {"req_1"}, "X-Sluice-Queue-Ms": {"0"}, "X-Sluice-Attempts": {"0"}, "Content-Length": {"115"}},
			body: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_1"}`},
		{name: "shutting down: status filled in, retry invited", p: llm.Anthropic, err: &dispatch.Error{Reason: dispatch.ErrStopped, Message: "stopped"},
			status: 503,
			header: http.Header{"Content-Type": {"application/json"}, "X-Should-Retry": {"true"}, "Retry-After": {"1"}, "Retry-After-Ms": {"1000"},
				"Request-Id": {"req_1"}, "X-Sluice-Request-Id": {"req_1"}, "X-Sluice-Queue-Ms": {"0"}, "X-Sluice-Attempts": {"0"}, "Content-Length": {"82"}},
			body: `{"type":"error","error":{"type":"overloaded_error","message":"stopped"},"request_id":"req_1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pr, ok := frontdoor.ProblemFor(tc.err)
			require.True(t, ok)
			status, h, body := frontdoor.Render(tc.p, "req_1", pr)
			require.Equal(t, tc.status, status)
			require.JSONEq(t, tc.body, string(body))
			tc.header.Set("Content-Length", h.Get("Content-Length"))
			require.Equal(t, tc.header, h)

			// Both adapters send exactly what Render returns.
			rec := httptest.NewRecorder()
			frontdoor.WriteProblem(rec, tc.p, "req_1", pr)
			require.Equal(t, status, rec.Code)
			require.Equal(t, h, rec.Header())
			require.Equal(t, string(body), rec.Body.String())

			resp := frontdoor.ProblemResponse(nil, tc.p, "req_1", pr)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, status, resp.StatusCode)
			require.Equal(t, h, resp.Header)
			require.Equal(t, string(body), string(got))
			require.Equal(t, int64(len(body)), resp.ContentLength)
		})
	}
	_, ok := frontdoor.ProblemFor(errors.New("dial tcp: refused"))
	require.False(t, ok, "only Sluice's own answers are rendered")
}

func TestWriteEnvelopeSharesTheHeaders(t *testing.T) {
	t.Parallel()
	pr := frontdoor.Problem{Status: 503, Message: "paused", RetryAfter: 2200 * time.Millisecond}
	rec := httptest.NewRecorder()
	frontdoor.WriteEnvelope(rec, pr, []byte(`{"type":"error"}`))
	require.Equal(t, 503, rec.Code)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}, "Content-Length": {"16"}, "Retry-After": {"3"},
		"Retry-After-Ms": {"2200"}, "X-Should-Retry": {"false"}}, rec.Header())
}
