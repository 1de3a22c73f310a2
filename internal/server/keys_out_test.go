package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestEveryKeyRevokedIsAnOutageAndJobsWait: the provider rejects every
// key of the pool. A client through the official SDK gets the outage
// answer (529 overloaded_error naming the cause), never the provider's
// 401, which it would read as its own key being wrong; the status page
// shows the keys out; the jobs queued meanwhile wait (none dies, none
// burns an attempt on the rejection) and all succeed once the provider
// accepts a key again.
func TestEveryKeyRevokedIsAnOutageAndJobsWait(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	for _, k := range []string{"sk-1", "sk-2"} {
		require.NoError(t, m.RevokeKey(k, mock.KeyRevoked))
	}
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(),
			APIKeys: []upcfg.Key{{Key: "sk-1"}, {Key: "sk-2"}}, KeyProbeInterval: 200 * time.Millisecond}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	c := anthropic.NewClient(aoption.WithBaseURL(base+"/claude"), aoption.WithAPIKey("sk-client"), aoption.WithMaxRetries(0))
	_, err = c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 529, apiErr.StatusCode, "an outage, not the provider's 401")
	require.Contains(t, apiErr.RawJSON(), "overloaded_error")
	require.Contains(t, apiErr.RawJSON(), "rejected every key")
	require.Contains(t, apiErr.RawJSON(), "invalid x-api-key", "the cause is named")
	require.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	code, body := call(t, "GET", base+"/v1/status", "", "")
	require.Equal(t, http.StatusOK, code)
	var st struct {
		Upstreams []struct {
			Name string `json:"name"`
			Keys []struct {
				Out bool `json:"out"`
			} `json:"keys"`
		} `json:"upstreams"`
	}
	require.NoError(t, json.Unmarshal(body, &st), string(body))
	require.Len(t, st.Upstreams, 1)
	require.Len(t, st.Upstreams[0].Keys, 2)
	for _, k := range st.Upstreams[0].Keys {
		require.True(t, k.Out, "the status shows every key out: %s", body)
	}

	const n = 6
	var ids []string
	for i := range n {
		code, body := call(t, "POST", base+"/v1/jobs", "", fmt.Sprintf(`{"upstream":"claude",
			"request":{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"job %d"}]}}`, i))
		require.Equal(t, http.StatusAccepted, code, string(body))
		var j struct {
			ID json.Number `json:"id"`
		}
		require.NoError(t, json.Unmarshal(body, &j))
		ids = append(ids, j.ID.String())
	}
	type jobView struct {
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	}
	get := func(id string) jobView {
		var j jobView
		_, b := call(t, "GET", base+"/v1/jobs/"+id, "", "")
		require.NoError(t, json.Unmarshal(b, &j))
		return j
	}
	// The probes keep meeting the rejection: the jobs wait.
	require.Eventually(t, func() bool { return m.Stats().Keys["sk-1"].ByStatus["401"] >= 3 }, 30*time.Second, time.Millisecond)
	for _, id := range ids {
		j := get(id)
		require.NotEqual(t, "dead", j.State, "job %s died of a rejected key", id)
		require.Zero(t, j.Attempts, "job %s burnt an attempt on a rejected key", id)
	}

	m.RestoreKey("sk-2")
	for _, id := range ids {
		var j jobView
		require.Eventually(t, func() bool {
			_, b := call(t, "GET", base+"/v1/jobs/"+id+"?wait=5s", "", "")
			require.NoError(t, json.Unmarshal(b, &j))
			return j.State == "succeeded" || j.State == "dead"
		}, 60*time.Second, time.Millisecond, "job %s", id)
		require.Equal(t, "succeeded", j.State, "job %s", id)
		require.Equal(t, 1, j.Attempts, "job %s: the rejections burnt nothing", id)
	}
}

// TestPassThroughWhileEveryKeyIsOut: once the provider has rejected every
// key of the pool, the routes Sluice does not schedule (models, a stored
// response, token counting) answer the same outage as the scheduled ones
// (529 overloaded_error / 503 server_error naming the cause, with
// retry-after at the next key probe) without a call to the provider,
// never its 401, which a client reads as its own key being wrong. Before
// that they are forwarded as they are.
func TestPassThroughWhileEveryKeyIsOut(t *testing.T) { //nolint:tparallel // the subtests count the one provider's calls in turn
	t.Parallel()
	var calls atomic.Int64
	revoking := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		if r.Header.Get("Authorization") != "" { // OpenAI's key header
			_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided: sk-upstr****","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
	}))
	t.Cleanup(revoking.Close)
	ts, _ := realEngineServer(t, revoking.URL, func(u *upcfg.Config) { u.KeyProbeInterval = time.Minute })
	for _, tt := range []struct {
		name, scheduled, body, errType, cause string
		p                                     llm.Protocol
		status                                int
		pass                                  [][2]string // method, path
	}{
		{"anthropic", "/a/v1/messages", anthropicBody, "overloaded_error", "invalid x-api-key", llm.Anthropic, 529,
			[][2]string{{"GET", "/a/v1/models"}, {"POST", "/a/v1/messages/count_tokens"}}},
		{"openai", "/o/v1/chat/completions", openAIBody, "server_error", "Incorrect API key", llm.OpenAI, http.StatusServiceUnavailable,
			[][2]string{{"GET", "/o/v1/models"}, {"GET", "/o/v1/responses/resp_1"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A key still in: the pass-through is the provider's own answer.
			before := calls.Load()
			r, body := ts.do(t, tt.pass[0][0], tt.pass[0][1], "", nil)
			require.Equal(t, http.StatusUnauthorized, r.StatusCode, "%s", body)
			require.Equal(t, before+1, calls.Load())

			// A scheduled request meets the rejection: the pool's only key is out.
			r, body = ts.do(t, http.MethodPost, tt.scheduled, tt.body, nil)
			require.Equal(t, tt.status, r.StatusCode, "%s", body)
			require.Contains(t, requireProviderError(t, tt.p, body, tt.errType), "rejected every key")

			before = calls.Load()
			for _, pass := range tt.pass {
				body := ""
				if pass[0] == http.MethodPost {
					body = anthropicBody
				}
				r, b := ts.do(t, pass[0], pass[1], body, nil)
				require.Equal(t, tt.status, r.StatusCode, "%s %s: an outage, not the provider's 401: %s", pass[0], pass[1], b)
				msg := requireProviderError(t, tt.p, b, tt.errType)
				require.Contains(t, msg, "rejected every key", "%s %s", pass[0], pass[1])
				require.Contains(t, msg, tt.cause, "%s %s: the cause is named", pass[0], pass[1])
				require.Contains(t, msg, "next key probe in 1m0s", "%s %s", pass[0], pass[1])
				require.Equal(t, "60", r.Header.Get("Retry-After"), "%s %s", pass[0], pass[1])
				require.NotEmpty(t, r.Header.Get(frontdoor.RequestIDHeader(tt.p)), "%s %s", pass[0], pass[1])
			}
			require.Equal(t, before, calls.Load(), "no pass-through is sent with a key known to be rejected")
		})
	}
}
