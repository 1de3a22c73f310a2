package provider_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestStreamObserverResponses(t *testing.T) {
	t.Parallel()
	completed := llm.Usage{InputTokens: 37, OutputTokens: 11, CacheReadInputTokens: 1024, ReasoningTokens: 5, ServiceTier: "default"}
	head := strings.Join(strings.SplitAfter(responsesStream, "\n\n")[:2], "")
	upToDelta := strings.Join(strings.SplitAfter(responsesStream, "\n\n")[:5], "")
	type want struct {
		usage    llm.Usage
		hasUsage bool
		content  bool
		done     bool
		events   int
		errType  string
		errCode  string
	}
	tests := []struct {
		name   string
		e      provider.Endpoint
		stream string
		want   want
	}{
		{"completed", provider.EndpointResponses, responsesStream,
			want{usage: completed, hasUsage: true, content: true, done: true, events: 9}},
		{"named events are recognised on the chat observer", provider.EndpointChat, responsesStream,
			want{usage: completed, hasUsage: true, content: true, done: true, events: 9}},
		{"created and in_progress are not content", provider.EndpointResponses, head, want{events: 2}},
		{"failed after a delta", provider.EndpointResponses, upToDelta + responsesFailed,
			want{usage: llm.Usage{InputTokens: 37, OutputTokens: 2, ServiceTier: "default"}, hasUsage: true, content: true, events: 6,
				errType: "server_error", errCode: "server_error"}},
		{"error event before content", provider.EndpointResponses, head + responsesErrorEvent,
			want{events: 3, errType: "error", errCode: "rate_limit_exceeded"}},
		{"incomplete is done", provider.EndpointResponses, head + responsesIncomplete,
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 16, ServiceTier: "flex"}, hasUsage: true, done: true, events: 3}},
		{"types from data when events are unnamed", provider.EndpointResponses,
			strings.NewReplacer("event: response.created\n", "", "event: response.output_item.added\n", "", "event: response.completed\n", "").Replace(responsesStream),
			want{usage: completed, hasUsage: true, content: true, done: true, events: 9}},
		{"truncated", provider.EndpointResponses, upToDelta + "event: response.output_text.delta\ndata: {", want{content: true, events: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, chunk := range []int{len(tt.stream) + 1, 1, 11} {
				o := provider.NewStreamObserverFor(llm.OpenAI, tt.e)
				for off := 0; off < len(tt.stream); off += chunk {
					_, err := o.Write([]byte(tt.stream[off:min(off+chunk, len(tt.stream))]))
					require.NoError(t, err)
				}
				u, ok := o.Usage()
				require.Equal(t, tt.want.hasUsage, ok)
				require.Equal(t, tt.want.usage, u)
				require.Equal(t, tt.want.content, o.Content())
				require.Equal(t, tt.want.done, o.Done())
				require.Equal(t, tt.want.events, o.Events())
				se, hasErr := o.StreamError()
				require.Equal(t, tt.want.errType != "", hasErr)
				if hasErr {
					require.Equal(t, llm.StreamFail, se.Kind)
					require.Equal(t, tt.want.errType, se.ErrorType)
					require.Equal(t, tt.want.errCode, se.Code)
					require.NotEmpty(t, se.Message)
				}
			}
		})
	}
}

func TestStreamObserverChatServiceTier(t *testing.T) {
	t.Parallel()
	stream := strings.ReplaceAll(openAIStream, `"model":"gpt-4o-mini",`, `"model":"gpt-4o-mini","service_tier":"flex",`)
	o := provider.NewStreamObserver(llm.OpenAI)
	_, _ = o.Write([]byte(stream))
	u, ok := o.Usage()
	require.True(t, ok)
	require.Equal(t, llm.Usage{InputTokens: 9, OutputTokens: 1, ServiceTier: "flex"}, u)
}

func TestStreamObserverAnthropicCacheSplit(t *testing.T) {
	t.Parallel()
	start := "event: message_start\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":3,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":1,"service_tier":"standard"}}}` + "\n\n"
	o := provider.NewStreamObserver(llm.Anthropic)
	_, _ = o.Write([]byte(start + msgDelta(`{"input_tokens":3,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,"output_tokens":9}`) + msgStop))
	u, _ := o.Usage()
	require.Equal(t, llm.Usage{InputTokens: 3, OutputTokens: 9, CacheCreationInputTokens: 3000, CacheCreation5mInputTokens: 1000,
		CacheCreation1hInputTokens: 2000, ServiceTier: "standard"}, u, "message_delta keeps the split and the tier")
}

func TestStreamObserverResponseID(t *testing.T) {
	t.Parallel()
	o := provider.NewStreamObserverFor(llm.OpenAI, provider.EndpointResponses)
	require.Empty(t, o.ResponseID())
	_, _ = o.Write([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_9\",\"status\":\"in_progress\"}}\n\n"))
	require.Equal(t, "resp_9", o.ResponseID())
	require.False(t, o.Content())
	_, _ = o.Write([]byte("event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"response\":{\"id\":\"resp_other\"}}\n\n"))
	require.Equal(t, "resp_9", o.ResponseID(), "the first announced id stays")
}
