package provider_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/provider"
)

type ev struct{ event, data, id string }

func collect(events []provider.SSEEvent) []ev {
	out := []ev{}
	for _, e := range events {
		out = append(out, ev{e.Event, string(e.Data), e.ID})
	}
	return out
}

// feedChunks feeds stream split at the given cut points (ascending).
func feedChunks(p *provider.SSEParser, stream string, cuts []int) []ev {
	out := []ev{}
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		out = append(out, collect(p.Feed([]byte(stream[prev:c])))...)
		prev = c
	}
	return out
}

func TestSSEParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		stream      string
		want        []ev
		wantPending bool
	}{
		{
			name:   "anthropic spec stream",
			stream: anthropicStream,
			want: []ev{
				{"message_start", `{"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}`, ""},
				{"content_block_start", `{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}`, ""},
				{"ping", `{"type": "ping"}`, ""},
				{"content_block_delta", `{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}`, ""},
				{"content_block_delta", `{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}`, ""},
				{"content_block_stop", `{"type": "content_block_stop", "index": 0}`, ""},
				{"message_delta", `{"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}`, ""},
				{"message_stop", `{"type": "message_stop"}`, ""},
			},
		},
		{name: "openai done marker", stream: "data: {\"a\":1}\n\ndata: [DONE]\n\n", want: []ev{{"", `{"a":1}`, ""}, {"", "[DONE]", ""}}},
		{name: "CRLF", stream: "event: x\r\ndata: 1\r\n\r\n", want: []ev{{"x", "1", ""}}},
		{name: "CR only", stream: "event: x\rdata: 1\r\rdata: 2\r\r", want: []ev{{"x", "1", ""}, {"", "2", ""}}},
		{name: "mixed endings", stream: "data: a\r\ndata: b\rdata: c\n\r\n", want: []ev{{"", "a\nb\nc", ""}}},
		{name: "comments ignored", stream: ": keep-alive\n:\ndata: x\n: mid\n\n", want: []ev{{"", "x", ""}}},
		{name: "multi-line data", stream: "data: line1\ndata: line2\ndata:\n\n", want: []ev{{"", "line1\nline2\n", ""}}},
		{name: "one leading space removed", stream: "data:nospace\n\ndata:  two\n\n", want: []ev{{"", "nospace", ""}, {"", " two", ""}}},
		{name: "field without colon", stream: "data\n\n", want: []ev{{"", "", ""}}},
		{name: "event without data is not dispatched", stream: "event: ping\n\ndata: x\n\n", want: []ev{{"", "x", ""}}},
		{name: "unknown fields and retry ignored", stream: "retry: 10\nfoo: bar\ndata: x\n\n", want: []ev{{"", "x", ""}}},
		{name: "id persists", stream: "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", want: []ev{{"", "a", "7"}, {"", "b", "7"}, {"", "c", ""}}},
		{name: "id with NUL ignored", stream: "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n", want: []ev{{"", "a", "1"}, {"", "b", "1"}}},
		{name: "BOM at start ignored", stream: "\xEF\xBB\xBFdata: x\n\n", want: []ev{{"", "x", ""}}},
		{name: "BOM later is part of the field name", stream: "data: x\n\n\xEF\xBB\xBFdata: y\n\n", want: []ev{{"", "x", ""}}},
		{name: "truncated event is pending", stream: "data: x\n\ndata: y\n", want: []ev{{"", "x", ""}}, wantPending: true},
		{name: "partial line is pending", stream: "data: x", want: []ev{}, wantPending: true},
		{name: "blank lines alone", stream: "\n\n\r\n", want: []ev{}},
		{name: "empty", stream: "", want: []ev{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var whole provider.SSEParser
			require.Equal(t, tt.want, feedChunks(&whole, tt.stream, nil))
			require.Equal(t, tt.wantPending, whole.Pending())
			// Every two-way split, and byte by byte, gives the same events.
			for cut := 0; cut <= len(tt.stream); cut++ {
				var p provider.SSEParser
				require.Equal(t, tt.want, feedChunks(&p, tt.stream, []int{cut}), "cut at %d", cut)
				require.Equal(t, tt.wantPending, p.Pending())
			}
			var bytewise provider.SSEParser
			cuts := make([]int, 0, len(tt.stream))
			for i := 1; i < len(tt.stream); i++ {
				cuts = append(cuts, i)
			}
			require.Equal(t, tt.want, feedChunks(&bytewise, tt.stream, cuts))
		})
	}
}

func TestSSEParserEventsOwnTheirData(t *testing.T) {
	t.Parallel()
	var p provider.SSEParser
	buf := []byte("data: first\n\n")
	first := p.Feed(buf)
	copy(buf, "data: XXXXX\n\n")
	second := p.Feed([]byte("data: second\n\n"))
	require.Equal(t, "first", string(first[0].Data))
	require.Equal(t, "second", string(second[0].Data))
	require.Nil(t, p.Feed([]byte(": nothing\n")))
}

// FuzzSSEParser checks chunking invariance: the stream split at arbitrary
// points yields the same events as the stream fed whole.
func FuzzSSEParser(f *testing.F) {
	f.Add([]byte(anthropicStream), []byte{3, 50, 7})
	f.Add([]byte(openAIStream), []byte{1, 1, 1, 200})
	f.Add([]byte(anthropicStreamError), []byte{13})
	f.Add([]byte("event: x\r\ndata: 1\r\n\r\ndata: 2\r\r"), []byte{9, 1})
	f.Add([]byte("\xEF\xBB\xBFid: 1\ndata: a\n: c\n\n"), []byte{1, 1, 1})
	f.Fuzz(func(t *testing.T, stream []byte, splits []byte) {
		var whole provider.SSEParser
		want := collect(whole.Feed(stream))
		var p provider.SSEParser
		got := []ev{}
		rest := stream
		for _, s := range splits {
			n := min(int(s), len(rest))
			got = append(got, collect(p.Feed(rest[:n]))...)
			rest = rest[n:]
		}
		got = append(got, collect(p.Feed(rest))...)
		require.Equal(t, want, got)
		require.Equal(t, whole.Pending(), p.Pending())
		for _, e := range want {
			require.NotContains(t, e.event, "\n")
			require.NotContains(t, e.id, "\x00")
		}
	})
}

func benchStream(events int) []byte {
	var sb strings.Builder
	sb.WriteString(strings.SplitAfterN(anthropicStream, "\n\n", 2)[0])
	for range events {
		sb.WriteString("event: content_block_delta\n")
		sb.WriteString(`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The quick brown fox jumps over the lazy dog. "}}` + "\n\n")
	}
	sb.WriteString("event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}` + "\n\n")
	sb.WriteString("event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n")
	return []byte(sb.String())
}

func BenchmarkSSEParserFeed(b *testing.B) {
	stream := benchStream(2000)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		var p provider.SSEParser
		for off := 0; off < len(stream); off += 4096 {
			p.Feed(stream[off:min(off+4096, len(stream))])
		}
	}
}
