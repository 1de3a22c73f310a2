package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestSDKCountTokensAndCacheControlThroughGateway: the official Go SDK's
// CountTokens and a cache_control request go through the gateway to the
// mock unchanged: the count is the provider's (the route's own bucket,
// with Sluice's headers), the first cached request writes the prefix, the
// second reads it on the same key, and the status reports what the cache
// served.
func TestSDKCountTokensAndCacheControlThroughGateway(t *testing.T) {
	t.Parallel()
	f := startGateway(t, mock.Limits{RPM: 600, ITPM: 200_000, OTPM: 60_000, CountTokensRPM: 60}, 5, mock.Faults{},
		func(c *upcfg.Config) { c.Limits.CountTokensPerMinute = 60 })
	c := f.anthropic()
	system := strings.Repeat("You are a careful assistant. ", 600) // about 4,350 tokens in the mock's count
	var raw *http.Response
	count, err := c.Messages.CountTokens(t.Context(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-5",
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: []anthropic.TextBlockParam{{Text: system, CacheControl: anthropic.NewCacheControlEphemeralParam()}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("how long is this?"))},
	}, aoption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Greater(t, count.InputTokens, int64(len(system)/4), "the provider's count of the whole prompt")
	require.Equal(t, "anthropic", raw.Header.Get("X-Sluice-Upstream"))
	require.Equal(t, "1", raw.Header.Get("X-Sluice-Attempts"))
	require.NotEmpty(t, raw.Header.Get("Anthropic-Ratelimit-Requests-Limit"), "the route's own rate-limit headers, passed through")

	ask := func(q string) *anthropic.Message {
		t.Helper()
		m, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 32,
			System:   []anthropic.TextBlockParam{{Text: system, CacheControl: anthropic.NewCacheControlEphemeralParam()}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(q))}})
		require.NoError(t, err)
		return m
	}
	first := ask("first question")
	require.Positive(t, first.Usage.CacheCreationInputTokens, "the first request writes the prefix")
	require.Zero(t, first.Usage.CacheReadInputTokens)
	second := ask("second question")
	require.Equal(t, first.Usage.CacheCreationInputTokens, second.Usage.CacheReadInputTokens, "the second reads it")
	require.Zero(t, second.Usage.CacheCreationInputTokens)

	st := f.mock.Stats()
	require.EqualValues(t, 1, st.Overall.ByEndpoint[mock.EndpointCountTokens])
	require.EqualValues(t, 2, st.Overall.ByEndpoint[mock.EndpointMessages])
	require.Zero(t, st.Overall.ByStatus["429"])

	resp, err := http.Get("http://" + f.gateway.Addr() + "/v1/status")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var status struct {
		Upstreams []struct {
			Name              string `json:"name"`
			CachedInputTokens int64  `json:"cached_input_tokens"`
		} `json:"upstreams"`
	}
	require.NoError(t, json.Unmarshal(b, &status))
	require.Equal(t, "anthropic", status.Upstreams[0].Name)
	require.Equal(t, second.Usage.CacheReadInputTokens, status.Upstreams[0].CachedInputTokens)
}

// TestCountTokensRefusedAt429WhenItsBucketIsEmpty: a counting request no
// key's bucket can take before its deadline is answered 429 in
// Anthropic's shape with retry-after, by the gateway itself; the messages
// route is untouched.
func TestCountTokensRefusedAt429WhenItsBucketIsEmpty(t *testing.T) {
	t.Parallel()
	f := startGateway(t, mock.Limits{RPM: 600, CountTokensRPM: 12}, 5, mock.Faults{},
		func(c *upcfg.Config) { c.Limits.CountTokensPerMinute = 12 })
	body := `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`
	var refused *http.Response
	for range 5 {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+f.gateway.Addr()+"/anthropic/v1/messages/count_tokens", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Sluice-Deadline", "1s")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			refused = resp
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(b, &e), "%s", b)
			require.Equal(t, "error", e.Type)
			require.Equal(t, "rate_limit_error", e.Error.Type)
			break
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	}
	require.NotNil(t, refused, "a bucket of 12 a minute, 5 s deep, holds one request: the next waits 5 s, past its 1 s deadline")
	require.NotEmpty(t, refused.Header.Get("Retry-After"))
	require.Zero(t, f.mock.Stats().Overall.ByStatus["429"], "the provider never answered 429")
	_, err := f.anthropic().Messages.New(t.Context(), messageParams("still served"))
	require.NoError(t, err)
}
