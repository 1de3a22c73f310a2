package provider_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

const (
	msgStartCache = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":50,"output_tokens":1}}}` + "\n\n"
	pingEvent  = "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	blockStart = "event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n"
	msgStop    = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func msgDelta(usage string) string {
	return "event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":` + usage + "}\n\n"
}

func TestStreamObserver(t *testing.T) {
	t.Parallel()
	type want struct {
		usage    llm.Usage
		hasUsage bool
		content  bool
		done     bool
		events   int
		errType  string
	}
	tests := []struct {
		name   string
		p      llm.Protocol
		stream string
		want   want
	}{
		{"anthropic spec stream", llm.Anthropic, anthropicStream,
			want{usage: llm.Usage{InputTokens: 25, OutputTokens: 15}, hasUsage: true, content: true, done: true, events: 8}},
		{"message_start and ping are not content", llm.Anthropic, msgStartCache + pingEvent,
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 1, CacheCreationInputTokens: 100, CacheReadInputTokens: 50}, hasUsage: true, events: 2}},
		{"error before content", llm.Anthropic, msgStartCache + pingEvent + anthropicStreamError,
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 1, CacheCreationInputTokens: 100, CacheReadInputTokens: 50}, hasUsage: true, events: 3, errType: "overloaded_error"}},
		{"error after content", llm.Anthropic, msgStartCache + blockStart + anthropicStreamError,
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 1, CacheCreationInputTokens: 100, CacheReadInputTokens: 50}, hasUsage: true, content: true, events: 3, errType: "overloaded_error"}},
		{"last message_delta wins, cache kept", llm.Anthropic, msgStartCache + blockStart + msgDelta(`{"output_tokens":7}`) + msgDelta(`{"output_tokens":20}`) + msgStop,
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 20, CacheCreationInputTokens: 100, CacheReadInputTokens: 50}, hasUsage: true, content: true, done: true, events: 5}},
		{"message_delta carrying input counts", llm.Anthropic, msgStartCache + msgDelta(`{"output_tokens":3,"input_tokens":12,"cache_read_input_tokens":0}`),
			want{usage: llm.Usage{InputTokens: 12, OutputTokens: 3, CacheCreationInputTokens: 100}, hasUsage: true, content: true, events: 2}},
		{"event names missing: types from data", llm.Anthropic,
			strings.NewReplacer("event: message_start\n", "", "event: content_block_delta\n", "", "event: message_delta\n", "", "event: message_stop\n", "").Replace(anthropicStream),
			want{usage: llm.Usage{InputTokens: 25, OutputTokens: 15}, hasUsage: true, content: true, done: true, events: 8}},
		{"truncated stream", llm.Anthropic, msgStartCache + blockStart + "event: content_block_delta\ndata: {",
			want{usage: llm.Usage{InputTokens: 10, OutputTokens: 1, CacheCreationInputTokens: 100, CacheReadInputTokens: 50}, hasUsage: true, content: true, events: 2}},
		{"negative usage read as zero", llm.Anthropic, msgDelta(`{"output_tokens":-5}`),
			want{hasUsage: true, content: true, events: 1}},
		{"openai spec stream", llm.OpenAI, openAIStream,
			want{usage: llm.Usage{InputTokens: 9, OutputTokens: 1}, hasUsage: true, content: true, done: true, events: 5}},
		{"openai without usage chunk", llm.OpenAI, strings.Join(strings.Split(openAIStream, "\n\n")[:3], "\n\n") + "\n\ndata: [DONE]\n\n",
			want{content: true, done: true, events: 4}},
		{"openai error frame, first wins", llm.OpenAI, openAIStreamError + `data: {"error":{"message":"second","type":"other"}}` + "\n\n",
			want{events: 2, errType: "server_error"}},
		{"openai usage chunk is not content", llm.OpenAI, strings.Split(openAIStream, "\n\n")[3] + "\n\n",
			want{usage: llm.Usage{InputTokens: 9, OutputTokens: 1}, hasUsage: true, events: 1}},
		{"garbage", llm.OpenAI, "data: {not json\n\nrandom bytes", want{events: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, chunk := range []int{len(tt.stream) + 1, 1, 7} {
				o := provider.NewStreamObserver(tt.p)
				for off := 0; off < len(tt.stream); off += chunk {
					b := []byte(tt.stream[off:min(off+chunk, len(tt.stream))])
					n, err := o.Write(b)
					require.NoError(t, err)
					require.Equal(t, len(b), n)
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
				}
			}
		})
	}
}

func TestStreamObserverConcurrentReads(t *testing.T) {
	t.Parallel()
	o := provider.NewStreamObserver(llm.Anthropic)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < len(anthropicStream); i += 16 {
			_, _ = o.Write([]byte(anthropicStream[i:min(i+16, len(anthropicStream))]))
		}
	})
	wg.Go(func() {
		for range 100 {
			_ = o.Content()
			_, _ = o.Usage()
		}
	})
	wg.Wait()
	require.True(t, o.Done())
}

// FuzzStreamObserver holds the observer to the same view of a stream
// whatever its chunking, for every protocol and endpoint (kind: 0
// Anthropic, 1 OpenAI chat, 2 OpenAI Responses).
func FuzzStreamObserver(f *testing.F) {
	f.Add(uint8(0), []byte(anthropicStream), uint8(5))
	f.Add(uint8(0), []byte(msgStartCache+anthropicStreamError), uint8(1))
	f.Add(uint8(1), []byte(openAIStream), uint8(9))
	f.Add(uint8(1), []byte(openAIStreamError), uint8(0))
	f.Add(uint8(2), []byte(responsesStream), uint8(13))
	f.Add(uint8(2), []byte(responsesStream[:300]+responsesFailed), uint8(2))
	f.Add(uint8(1), []byte(responsesErrorEvent+responsesIncomplete), uint8(40))
	f.Fuzz(func(t *testing.T, kind uint8, stream []byte, chunk uint8) {
		p, e := llm.OpenAI, provider.EndpointChat
		switch kind % 3 {
		case 0:
			p = llm.Anthropic
		case 2:
			e = provider.EndpointResponses
		}
		whole := provider.NewStreamObserverFor(p, e)
		_, _ = whole.Write(stream)
		split := provider.NewStreamObserverFor(p, e)
		step := int(chunk) + 1
		for i := 0; i < len(stream); i += step {
			n, err := split.Write(stream[i:min(i+step, len(stream))])
			require.NoError(t, err)
			require.Equal(t, min(step, len(stream)-i), n)
		}
		u, ok := split.Usage()
		require.GreaterOrEqual(t, u.InputTokens, int64(0))
		require.GreaterOrEqual(t, u.OutputTokens, int64(0))
		require.GreaterOrEqual(t, u.CacheCreationInputTokens, int64(0))
		require.GreaterOrEqual(t, u.CacheReadInputTokens, int64(0))
		require.GreaterOrEqual(t, u.CacheCreation5mInputTokens, int64(0))
		require.GreaterOrEqual(t, u.CacheCreation1hInputTokens, int64(0))
		require.GreaterOrEqual(t, u.ReasoningTokens, int64(0))
		wu, wok := whole.Usage()
		require.Equal(t, wok, ok)
		require.Equal(t, wu, u)
		require.Equal(t, whole.Events(), split.Events())
		require.Equal(t, whole.Content(), split.Content())
		require.Equal(t, whole.Done(), split.Done())
		we, weok := whole.StreamError()
		se, seok := split.StreamError()
		require.Equal(t, weok, seok)
		require.Equal(t, we, se)
	})
}

func BenchmarkStreamObserver(b *testing.B) {
	for _, tc := range []struct {
		name   string
		p      llm.Protocol
		stream []byte
	}{
		{"anthropic", llm.Anthropic, benchStream(2000)},
		{"openai", llm.OpenAI, []byte(strings.Repeat(strings.Split(openAIStream, "\n\n")[1]+"\n\n", 2000) + "data: [DONE]\n\n")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.stream)))
			b.ReportAllocs()
			for b.Loop() {
				o := provider.NewStreamObserver(tc.p)
				for off := 0; off < len(tc.stream); off += 4096 {
					_, _ = o.Write(tc.stream[off:min(off+4096, len(tc.stream))])
				}
			}
		})
	}
}
