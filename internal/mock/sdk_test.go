package mock

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clock"
)

// The official SDKs are the proof that the mock speaks the real protocols:
// they decode its bodies, streams and errors with their own code.

func startMock(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return s
}

func anthropicClient(url string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(url), aoption.WithAPIKey("sk-ant-test")}, opts...)...)
}

func openAIClient(url string) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(url+"/v1"), ooption.WithAPIKey("sk-test"), ooption.WithMaxRetries(0))
}

func TestSDKAnthropicMessage(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 50, ITPM: 30_000, OTPM: 8_000}, OutputTokens: OutputRange{Min: 7, Max: 7}})
	c := anthropicClient(s.URL())
	msg, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello there"))},
	})
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	require.Equal(t, int64(7), msg.Usage.OutputTokens)
	require.Equal(t, int64(3), msg.Usage.InputTokens)
	require.Len(t, msg.Content, 1)
	require.Len(t, strings.Fields(msg.Content[0].Text), 7)
}

func TestSDKAnthropicStreamAccumulates(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{OutputTokens: OutputRange{Min: 12, Max: 12}})
	c := anthropicClient(s.URL())
	stream := c.Messages.NewStreaming(t.Context(), anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello there"))},
	})
	var msg anthropic.Message
	for stream.Next() {
		require.NoError(t, msg.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, int64(12), msg.Usage.OutputTokens)
	require.Equal(t, int64(3), msg.Usage.InputTokens)
	require.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	require.Len(t, strings.Fields(msg.Content[0].Text), 12)
}

func TestSDKOpenAIChat(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{Limits: Limits{RPM: 500, TPM: 200_000}, OutputTokens: OutputRange{Min: 5, Max: 5}})
	c := openAIClient(s.URL())
	cc, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", MaxCompletionTokens: openai.Int(32),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")},
	})
	require.NoError(t, err)
	require.Len(t, cc.Choices, 1)
	require.Equal(t, "stop", cc.Choices[0].FinishReason)
	require.Len(t, strings.Fields(cc.Choices[0].Message.Content), 5)
	require.Equal(t, int64(5), cc.Usage.CompletionTokens)
	require.Equal(t, int64(8), cc.Usage.TotalTokens)
}

func TestSDKOpenAIStreamWithUsage(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{OutputTokens: OutputRange{Min: 9, Max: 9}})
	c := openAIClient(s.URL())
	stream := c.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:         "gpt-4o-mini",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Len(t, acc.Choices, 1)
	require.Len(t, strings.Fields(acc.Choices[0].Message.Content), 9)
	require.Equal(t, int64(9), acc.Usage.CompletionTokens)
	require.Equal(t, int64(3), acc.Usage.PromptTokens)
}

func TestSDKBadRequestIsAnError(t *testing.T) {
	t.Parallel()
	s := startMock(t, Config{})
	ac := anthropicClient(s.URL())
	_, err := ac.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 64, // no messages
	})
	apiErr, ok := errors.AsType[*anthropic.Error](err)
	require.True(t, ok, "got %v", err)
	require.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	require.Contains(t, apiErr.Error(), "invalid_request_error")

	oc := openAIClient(s.URL())
	_, err = oc.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini"})
	oErr, ok := errors.AsType[*openai.Error](err)
	require.True(t, ok, "got %v", err)
	require.Equal(t, http.StatusBadRequest, oErr.StatusCode)
	require.Equal(t, "messages", oErr.Param)
}

// TestSDKHonoursRetryAfter uses the wall clock: the SDK sleeps for real.
func TestSDKHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	noCount := false
	// 60 RPM, one second deep: one request, then 1 s until the next.
	s, err := New(Config{Limits: Limits{RPM: 60}, BurstSeconds: 1, CountRejected: &noCount, Clock: clock.Real()})
	require.NoError(t, err)
	var mu sync.Mutex
	var arrivals []time.Time
	var codes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		now := time.Now() // observing the SDK's real sleep
		s.Handler().ServeHTTP(rec, r)
		mu.Lock()
		arrivals, codes = append(arrivals, now), append(codes, rec.status)
		mu.Unlock()
	}))
	defer srv.Close()
	c := anthropicClient(srv.URL)
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	_, err = c.Messages.New(t.Context(), params, aoption.WithMaxRetries(0))
	require.NoError(t, err) // drains the bucket
	_, err = c.Messages.New(t.Context(), params, aoption.WithMaxRetries(2))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{200, 429, 200}, codes)
	gap := arrivals[2].Sub(arrivals[1])
	require.GreaterOrEqual(t, gap, 900*time.Millisecond, "the SDK waited for retry-after: 1")
	require.Less(t, gap, 5*time.Second)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}
