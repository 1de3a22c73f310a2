package provider_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// lenCounter counts one token per byte, so expected estimates are easy to
// compute by hand.
type lenCounter struct{}

func (lenCounter) CountTokens(s string) int64 { return int64(len(s)) }

func TestByteCounter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bpt  int
		text string
		want int64
	}{
		{"empty", 0, "", 0},
		{"default rounds up", 0, "hello", 2},
		{"default exact", 0, "abcdefgh", 2},
		{"custom divisor", 3, "abcdefg", 3},
		{"negative divisor means default", -1, "abcde", 2},
		{"multibyte counts bytes", 0, "héllo", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, provider.ByteCounter{BytesPerToken: tt.bpt}.CountTokens(tt.text))
		})
	}
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	const oh = provider.RequestOverheadTokens
	const mo = provider.MessageOverheadTokens
	toolBody := `{"model":"m","max_tokens":10,"tools":[{"name":"get_weather","description":"Get weather","input_schema":{"type":"object"}}],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]}]}]}`
	openAITools := `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"ok"}],` +
		`"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"}}}]}`
	toolCalls := `[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`
	tests := []struct {
		name string
		p    llm.Protocol
		body string
		want provider.Cost
	}{
		{
			name: "anthropic spec request",
			p:    llm.Anthropic, body: anthropicRequest,
			want: provider.Cost{Model: "claude-sonnet-4-5-20250929", InputTokens: int64(len("You are terse.") + len("Hello, Claude") + mo + oh), OutputTokens: 1024},
		},
		{
			name: "anthropic system blocks and stream",
			p:    llm.Anthropic,
			body: `{"model":"m","max_tokens":5,"stream":true,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"abc"}]}`,
			want: provider.Cost{Model: "m", InputTokens: 3 + 3 + mo + oh, OutputTokens: 5, Stream: true},
		},
		{
			name: "anthropic tools, image, tool_use and tool_result",
			p:    llm.Anthropic, body: toolBody,
			want: provider.Cost{Model: "m", OutputTokens: 10, InputTokens: provider.ToolUseSystemTokens +
				int64(len("get_weather")+len("Get weather")+len(`{"type":"object"}`)) +
				3*mo + 2 + provider.ImageTokens + int64(len("get_weather")+len(`{"location":"Paris"}`)) + 5 + oh},
		},
		{
			name: "anthropic thinking and text document",
			p:    llm.Anthropic,
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}}]}]}`,
			want: provider.Cost{Model: "m", OutputTokens: 1, InputTokens: 3 + 3 + mo + oh},
		},
		{
			name: "anthropic unknown block counts its whole JSON",
			p:    llm.Anthropic,
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"new_thing","x":1}]}]}`,
			want: provider.Cost{Model: "m", OutputTokens: 1, InputTokens: int64(len(`{"type":"new_thing","x":1}`)) + mo + oh},
		},
		{
			name: "openai spec request: max_completion_tokens times n",
			p:    llm.OpenAI, body: openAIRequest,
			want: provider.Cost{Model: "gpt-4o-mini", InputTokens: int64(len("You are terse.")+len("Hello!")) + 2*mo + oh, OutputTokens: 512, Stream: true},
		},
		{
			name: "openai default output reservation",
			p:    llm.OpenAI, body: `{"model":"gpt","messages":[{"role":"user","content":"x"}]}`,
			want: provider.Cost{Model: "gpt", InputTokens: 1 + mo + oh, OutputTokens: provider.OpenAIDefaultMaxTokens},
		},
		{
			name: "openai legacy max_tokens",
			p:    llm.OpenAI, body: `{"model":"gpt","max_tokens":7,"n":3,"messages":[{"role":"user","content":"x"}]}`,
			want: provider.Cost{Model: "gpt", InputTokens: 1 + mo + oh, OutputTokens: 21},
		},
		{
			name: "openai max_completion_tokens wins over max_tokens",
			p:    llm.OpenAI, body: `{"model":"gpt","max_tokens":7,"max_completion_tokens":9,"messages":[{"role":"user","content":"x"}]}`,
			want: provider.Cost{Model: "gpt", InputTokens: 1 + mo + oh, OutputTokens: 9},
		},
		{
			name: "openai parts, tool calls and tools",
			p:    llm.OpenAI, body: openAITools,
			want: provider.Cost{Model: "gpt-4o", OutputTokens: provider.OpenAIDefaultMaxTokens, InputTokens: 2 + provider.ImageTokens +
				int64(len(toolCalls)) + int64(len("ok")) + 3*mo +
				provider.ToolUseSystemTokens + int64(len("f")+len("does f")+len(`{"type":"object"}`)) + oh},
		},
		{
			name: "openai output saturates instead of overflowing",
			p:    llm.OpenAI, body: `{"model":"gpt","max_tokens":9223372036854775807,"n":2,"messages":[{"role":"user","content":""}]}`,
			want: provider.Cost{Model: "gpt", InputTokens: mo + oh, OutputTokens: math.MaxInt64},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := provider.EstimateWith(tt.p, []byte(tt.body), lenCounter{})
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestEstimateDefaultCounter(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("a", 401)
	body := fmt.Sprintf(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":%q}]}`, text)
	got, err := provider.Estimate(llm.Anthropic, []byte(body))
	require.NoError(t, err)
	require.Equal(t, int64(101+provider.MessageOverheadTokens+provider.RequestOverheadTokens), got.InputTokens)
	nilCounter, err := provider.EstimateWith(llm.Anthropic, []byte(body), nil)
	require.NoError(t, err)
	require.Equal(t, got, nilCounter)
}

func TestEstimateRejects(t *testing.T) {
	t.Parallel()
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name string
		p    llm.Protocol
		body string
		want string
	}{
		{"not json", llm.Anthropic, `{"model":`, "not valid JSON"},
		{"not json openai", llm.OpenAI, `hello`, "could not parse the JSON body"},
		{"array", llm.Anthropic, `[1]`, "valid dictionary"},
		{"null", llm.OpenAI, `null`, "expected a JSON object"},
		{"missing model", llm.Anthropic, `{"max_tokens":1,` + msgs + `}`, "model: Field required"},
		{"empty model", llm.Anthropic, `{"model":"","max_tokens":1,` + msgs + `}`, "model: Field required"},
		{"model not string", llm.Anthropic, `{"model":5,"max_tokens":1,` + msgs + `}`, "model: Input should be a valid string"},
		{"missing max_tokens", llm.Anthropic, `{"model":"m",` + msgs + `}`, "max_tokens: Field required"},
		{"max_tokens string", llm.Anthropic, `{"model":"m","max_tokens":"10",` + msgs + `}`, "max_tokens: Input should be a valid integer"},
		{"max_tokens fractional", llm.Anthropic, `{"model":"m","max_tokens":1.5,` + msgs + `}`, "max_tokens: Input should be a valid integer"},
		{"max_tokens zero", llm.Anthropic, `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens: Input should be greater than or equal to 1"},
		{"missing messages", llm.Anthropic, `{"model":"m","max_tokens":1}`, "messages: Field required"},
		{"messages not list", llm.Anthropic, `{"model":"m","max_tokens":1,"messages":"hi"}`, "messages: Input should be a valid list"},
		{"messages empty", llm.Anthropic, `{"model":"m","max_tokens":1,"messages":[]}`, "at least 1 item"},
		{"message not object", llm.Anthropic, `{"model":"m","max_tokens":1,"messages":[5]}`, "messages.0: Input should be a valid dictionary"},
		{"content number", llm.Anthropic, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}`, "messages.0.content: Input should be a valid list"},
		{"block text number", llm.Anthropic, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, "messages.0.content.0.text: Input should be a valid string"},
		{"system number", llm.Anthropic, `{"model":"m","max_tokens":1,"system":1,` + msgs + `}`, "system: Input should be a valid list"},
		{"tools not list", llm.Anthropic, `{"model":"m","max_tokens":1,"tools":{},` + msgs + `}`, "tools: Input should be a valid list"},
		{"stream not bool", llm.Anthropic, `{"model":"m","max_tokens":1,"stream":"yes",` + msgs + `}`, "stream: Input should be a valid boolean"},
		{"openai missing model", llm.OpenAI, `{` + msgs + `}`, "Missing required parameter: 'model'."},
		{"openai missing messages", llm.OpenAI, `{"model":"m"}`, "Missing required parameter: 'messages'."},
		{"openai n zero", llm.OpenAI, `{"model":"m","n":0,` + msgs + `}`, "Invalid 'n': integer below minimum value"},
		{"openai n string", llm.OpenAI, `{"model":"m","n":"2",` + msgs + `}`, "Invalid type for 'n': expected an integer."},
		{"openai max_completion_tokens negative", llm.OpenAI, `{"model":"m","max_completion_tokens":-1,` + msgs + `}`, "Invalid 'max_completion_tokens'"},
		{"openai max_tokens zero", llm.OpenAI, `{"model":"m","max_tokens":0,` + msgs + `}`, "Invalid 'max_tokens'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.Estimate(tt.p, []byte(tt.body))
			require.ErrorIs(t, err, provider.ErrInvalidRequest)
			var re *provider.RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, 400, re.Status)
			require.Equal(t, "invalid_request_error", re.Type)
			require.Contains(t, re.Message, tt.want)
			require.Contains(t, re.Error(), tt.want)
		})
	}
}

func TestRequestErrorIsOnlyInvalidRequest(t *testing.T) {
	t.Parallel()
	err := &provider.RequestError{Status: 400, Type: "invalid_request_error", Message: "x"}
	require.ErrorIs(t, err, provider.ErrInvalidRequest)
	require.NotErrorIs(t, err, errors.New("invalid request"))
}

func TestEnsureStreamUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		p           llm.Protocol
		body        string
		wantChanged bool
		wantOptions string // expected stream_options JSON when changed
	}{
		{"openai stream without options", llm.OpenAI, openAIRequest, true, `{"include_usage":true}`},
		{"keeps other options", llm.OpenAI, `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}`, true, `{"include_obfuscation":false,"include_usage":true}`},
		{"include_usage false is turned on", llm.OpenAI, `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, true, `{"include_usage":true}`},
		{"null options", llm.OpenAI, `{"model":"m","stream":true,"stream_options":null}`, true, `{"include_usage":true}`},
		{"already asks", llm.OpenAI, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, false, ""},
		{"not streaming", llm.OpenAI, `{"model":"m","stream":false}`, false, ""},
		{"no stream field", llm.OpenAI, `{"model":"m"}`, false, ""},
		{"anthropic untouched", llm.Anthropic, `{"model":"m","stream":true}`, false, ""},
		{"garbage untouched", llm.OpenAI, `{"model":`, false, ""},
		{"options not object untouched", llm.OpenAI, `{"model":"m","stream":true,"stream_options":5}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(tt.body)
			out, changed := provider.EnsureStreamUsage(tt.p, in)
			require.Equal(t, tt.wantChanged, changed)
			if !changed {
				require.Equal(t, tt.body, string(out))
				return
			}
			var before, after map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(in, &before))
			require.NoError(t, json.Unmarshal(out, &after))
			require.JSONEq(t, tt.wantOptions, string(after["stream_options"]))
			delete(before, "stream_options")
			delete(after, "stream_options")
			require.Len(t, after, len(before))
			for k, v := range before {
				require.JSONEq(t, string(v), string(after[k]), k)
			}
		})
	}
}

func TestEnsureStreamUsageKeepsTextBytes(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"a <b> & c"}]}`
	out, changed := provider.EnsureStreamUsage(llm.OpenAI, []byte(body))
	require.True(t, changed)
	require.Contains(t, string(out), `"a <b> & c"`)
}

// goIdentifier matches what a Go program's own names look like in a
// message: a package-qualified identifier (llm.OpenAI, json.Number) or
// encoding/json's "Go value" / "Go struct field".
var goIdentifier = regexp.MustCompile(`\b(llm|provider|json|strconv|sluice|upstream|dispatch)\.[A-Z]\w*|\bGo (value|struct field)`)

// TestEstimateErrorsNameNoGoIdentifiers: the messages a client gets for a
// body Sluice refuses name the protocol and the field, never a Go
// identifier (issue 27: "The llm.OpenAI API expects a JSON payload").
func TestEstimateErrorsNameNoGoIdentifiers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    llm.Protocol
		body string
		want string
	}{
		{llm.OpenAI, `{`, "The OpenAI API expects a JSON payload"},
		{llm.OpenAI, `not json`, "The OpenAI API expects a JSON payload"},
		{llm.Anthropic, `{`, "not valid JSON"},
		{llm.OpenAI, `[]`, ""},
		{llm.Anthropic, `"x"`, ""},
		{llm.OpenAI, `{"model":5,"messages":[]}`, ""},
		{llm.Anthropic, `{"model":"m","max_tokens":"ten","messages":[]}`, ""},
		{llm.OpenAI, `{"model":"m","n":1.5,"messages":[]}`, ""},
		{llm.Anthropic, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":7}]}`, ""},
		{llm.OpenAI, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, ""},
	} {
		_, err := provider.Estimate(tt.p, []byte(tt.body))
		var re *provider.RequestError
		require.ErrorAs(t, err, &re, "%s %s", tt.p, tt.body)
		require.NotRegexp(t, goIdentifier, re.Message, "%s %s", tt.p, tt.body)
		require.Contains(t, re.Message, tt.want, "%s %s", tt.p, tt.body)
	}
}

func FuzzEstimate(f *testing.F) {
	f.Add(true, []byte(anthropicRequest))
	f.Add(false, []byte(openAIRequest))
	f.Add(true, []byte(`{"model":"m","max_tokens":10,"tools":[{"name":"t","input_schema":{}}],"messages":[{"role":"user","content":[{"type":"image"},{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}]}`))
	f.Add(false, []byte(`{"model":"m","n":0,"messages":[]}`))
	f.Add(true, []byte(`[`))
	f.Add(false, []byte(`{`))
	f.Add(false, []byte(`{"model":"m","messages":[{"content":[{"type":"text","text":5}]}]}`))
	f.Fuzz(func(t *testing.T, anthropic bool, body []byte) {
		p := llm.OpenAI
		if anthropic {
			p = llm.Anthropic
		}
		c, err := provider.Estimate(p, body)
		if err != nil {
			var re *provider.RequestError
			require.ErrorAs(t, err, &re)
			require.Equal(t, 400, re.Status)
			require.NotEmpty(t, re.Message)
			require.NotRegexp(t, goIdentifier, re.Message)
			return
		}
		require.NotEmpty(t, c.Model)
		require.GreaterOrEqual(t, c.InputTokens, int64(provider.RequestOverheadTokens+provider.MessageOverheadTokens))
		require.GreaterOrEqual(t, c.OutputTokens, int64(1))
		out, _ := provider.EnsureStreamUsage(p, body)
		require.True(t, json.Valid(out) || string(out) == string(body))
	})
}

func BenchmarkEstimate(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":4096,"system":"You are a helpful assistant.","messages":[`)
	for i := range 40 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":[{"type":"text","text":%q}]}`, strings.Repeat("The quick brown fox jumps over the lazy dog. ", 50))
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := provider.Estimate(llm.Anthropic, body); err != nil {
			b.Fatal(err)
		}
	}
}
