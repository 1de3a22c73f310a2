package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/llm"
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

// TestSDKInputTokensThroughGateway: openai-go's Responses.InputTokens.Count
// goes through the gateway on the route's own bucket (never the Responses
// queue or quota): the count is the provider's, equal to what the create
// of the same input is then charged, with the route's own rate-limit
// headers and Sluice's.
func TestSDKInputTokensThroughGateway(t *testing.T) {
	t.Parallel()
	f := startGateway(t, mock.Limits{RPM: 600, TPM: 1_000_000, CountTokensRPM: 60}, 5, mock.Faults{},
		func(c *upcfg.Config) { c.Limits.CountTokensPerMinute = 60 })
	c := f.openai()
	var raw *http.Response
	count, err := c.Responses.InputTokens.Count(t.Context(), responses.InputTokenCountParams{
		Model: openai.String("gpt-4.1"), Instructions: openai.String("Answer briefly."),
		Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String("how many tokens is this?")},
	}, ooption.WithResponseInto(&raw))
	require.NoError(t, err)
	require.Equal(t, "response.input_tokens", string(count.Object))
	require.Equal(t, "openai", raw.Header.Get("X-Sluice-Upstream"))
	require.Equal(t, "1", raw.Header.Get("X-Sluice-Attempts"))
	require.Equal(t, "60", raw.Header.Get("X-Ratelimit-Limit-Requests"), "the route's own rate-limit headers, passed through")
	r, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: "gpt-4.1", MaxOutputTokens: openai.Int(16),
		Instructions: openai.String("Answer briefly."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("how many tokens is this?")}})
	require.NoError(t, err)
	require.Equal(t, r.Usage.InputTokens, count.InputTokens)
	st := f.mock.Stats()
	require.EqualValues(t, 1, st.Overall.ByEndpoint[mock.EndpointInputTokens])
	require.EqualValues(t, 1, st.Overall.ByEndpoint[mock.EndpointResponses])
	require.EqualValues(t, 1, st.Overall.Admitted.Requests, "the count was not a model request")

	// A bad body is the gateway's own 400, in OpenAI's shape.
	_, err = c.Responses.InputTokens.Count(t.Context(), responses.InputTokenCountParams{},
		ooption.WithJSONSet("input", 5))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.EqualValues(t, 1, f.mock.Stats().Overall.ByEndpoint[mock.EndpointInputTokens], "it never reached the provider")
}

// TestCountingIsNeverCharged: a client with a budget counts tokens on
// both protocols (Anthropic count_tokens, OpenAI responses/input_tokens)
// through the gateway against the mock: served, and its spend and
// reservations are unchanged; a create is then charged.
func TestCountingIsNeverCharged(t *testing.T) {
	t.Parallel()
	m := startSpendMock(t)
	g, err := New(Config{Store: StoreNone, Listen: "127.0.0.1:0", Prices: spendPrices, Clients: budgetClient(admit.Budget{Day: 10}),
		Upstreams: []upcfg.Config{{Name: "a", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-a"},
			{Name: "o", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-o"}}},
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	tests := []struct {
		name, count, create, body, createBody string
	}{
		{"anthropic", "/a/v1/messages/count_tokens", "/a/v1/messages",
			`{"model":"claude-x","messages":[{"role":"user","content":"count me"}]}`,
			`{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"count me"}]}`},
		{"openai", "/o/v1/responses/input_tokens", "/o/v1/responses",
			`{"model":"gpt-x","input":"count me"}`, `{"model":"gpt-x","max_output_tokens":16,"input":"count me"}`},
	}
	for _, tt := range tests {
		before := clientSpend(t, readStatus(t, base, "ck-team"), "team")
		for range 3 {
			code, body := call(t, "POST", base+tt.count, "ck-team", tt.body)
			require.Equal(t, http.StatusOK, code, "%s: %s", tt.name, body)
			require.Contains(t, string(body), `"input_tokens"`)
		}
		after := clientSpend(t, readStatus(t, base, "ck-team"), "team")
		require.Equal(t, before.Day.SpentUSD, after.Day.SpentUSD, "%s: counting is free", tt.name)
		require.Zero(t, after.ReservedUSD, tt.name)
		code, body := call(t, "POST", base+tt.create, "ck-team", tt.createBody)
		require.Equal(t, http.StatusOK, code, "%s: %s", tt.name, body)
		require.Eventually(t, func() bool {
			s := clientSpend(t, readStatus(t, base, "ck-team"), "team")
			return s.ReservedUSD == 0 && s.Day.SpentUSD > after.Day.SpentUSD
		}, 10*time.Second, 10*time.Millisecond, "%s: the create is charged", tt.name)
	}
	st := m.Stats().Overall.ByEndpoint
	require.EqualValues(t, 3, st[mock.EndpointCountTokens])
	require.EqualValues(t, 3, st[mock.EndpointInputTokens])
}
