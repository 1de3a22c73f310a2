package batches

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
)

func TestParseResults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		proto llm.Protocol
		line  string
		want  Result
		retry bool
	}{
		{"anthropic succeeded", llm.Anthropic,
			`{"custom_id":"a","result":{"type":"succeeded","message":{"id":"msg_1","type":"message","usage":{"input_tokens":11,"output_tokens":36,"cache_read_input_tokens":4,"service_tier":"batch"}}}}`,
			Result{CustomID: "a", Type: Succeeded, Status: 200, HasUsage: true,
				Usage: llm.Usage{InputTokens: 11, OutputTokens: 36, CacheReadInputTokens: 4, ServiceTier: "batch"}}, false},
		{"anthropic invalid", llm.Anthropic,
			`{"custom_id":"b","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_1"}}}`,
			Result{CustomID: "b", Type: Errored, Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "max_tokens: Field required", RequestID: "req_1"}, false},
		{"anthropic server error", llm.Anthropic,
			`{"custom_id":"c","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"x"}}}}`,
			Result{CustomID: "c", Type: Errored, Status: 500, ErrorType: "api_error", ErrorMessage: "x"}, true},
		{"anthropic canceled", llm.Anthropic, `{"custom_id":"d","result":{"type":"canceled"}}`, Result{CustomID: "d", Type: Canceled}, true},
		{"anthropic expired", llm.Anthropic, `{"custom_id":"e","result":{"type":"expired"}}`, Result{CustomID: "e", Type: Expired}, true},
		{"openai succeeded", llm.OpenAI,
			`{"id":"batch_req_1","custom_id":"f","response":{"status_code":200,"request_id":"req_2","body":{"object":"chat.completion","usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}},"error":null}`,
			Result{CustomID: "f", Type: Succeeded, Status: 200, RequestID: "req_2", HasUsage: true, Usage: llm.Usage{InputTokens: 9, OutputTokens: 5}}, false},
		{"openai 400", llm.OpenAI,
			`{"id":"batch_req_2","custom_id":"g","response":{"status_code":400,"request_id":"req_3","body":{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":"invalid_value"}}},"error":null}`,
			Result{CustomID: "g", Type: Errored, Status: 400, RequestID: "req_3", ErrorType: "invalid_request_error", ErrorCode: "invalid_value", ErrorMessage: "bad"}, false},
		{"openai 429", llm.OpenAI,
			`{"custom_id":"h","response":{"status_code":429,"body":{"error":{"message":"slow","type":"requests","code":"rate_limit_exceeded"}}},"error":null}`,
			Result{CustomID: "h", Type: Errored, Status: 429, ErrorType: "requests", ErrorCode: "rate_limit_exceeded", ErrorMessage: "slow"}, true},
		{"openai expired", llm.OpenAI, `{"id":"r","custom_id":"i","response":null,"error":{"code":"batch_expired","message":"late"}}`,
			Result{CustomID: "i", Type: Expired, ErrorCode: "batch_expired", ErrorMessage: "late"}, true},
		{"openai cancelled", llm.OpenAI, `{"id":"r","custom_id":"j","response":null,"error":{"code":"batch_cancelled","message":"stop"}}`,
			Result{CustomID: "j", Type: Canceled, ErrorCode: "batch_cancelled", ErrorMessage: "stop"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []Result
			require.NoError(t, ParseResults(tc.proto, strings.NewReader("\n"+tc.line+"\r\n\n"), func(r Result) error {
				got = append(got, r)
				return nil
			}))
			require.Len(t, got, 1)
			got[0].Body = nil
			require.Equal(t, tc.want, got[0])
			require.Equal(t, tc.retry, got[0].Retryable())
		})
	}
}

func TestParseResultsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proto llm.Protocol
		input string
	}{
		{llm.Anthropic, `{"custom_id":"a","result":{"type":"succeeded"}}`},
		{llm.Anthropic, `{"custom_id":"a","result":{"type":"weird"}}`},
		{llm.Anthropic, `{"result":{"type":"canceled"}}`},
		{llm.OpenAI, `{"custom_id":"a","response":null,"error":null}`},
		{llm.OpenAI, `{"custom_id":"a"`},
	} {
		err := ParseResults(tc.proto, strings.NewReader(`{"custom_id":"ok","result":{"type":"canceled"},"response":{"status_code":200,"body":{}}}`+"\n"+tc.input), func(Result) error { return nil })
		require.ErrorIs(t, err, errResultLine, tc.input)
		require.ErrorContains(t, err, "results line 2", tc.input)
	}
	stop := errors.New("stop")
	err := ParseResults(llm.Anthropic, strings.NewReader(`{"custom_id":"a","result":{"type":"canceled"}}`), func(Result) error { return stop })
	require.ErrorIs(t, err, stop)
}

// FuzzParseResults: any input parses or fails with a line error, never a
// panic; every result parsed has a custom_id and a known type, and a
// success its 2xx status.
func FuzzParseResults(f *testing.F) {
	f.Add(`{"custom_id":"a","result":{"type":"succeeded","message":{"usage":{"input_tokens":1,"output_tokens":2}}}}`)
	f.Add(`{"custom_id":"b","response":{"status_code":200,"body":{"usage":{"prompt_tokens":3}}},"error":null}` + "\n" + `{"custom_id":"c","response":null,"error":{"code":"batch_expired"}}`)
	f.Add(`{"custom_id":"d","result":{"type":"errored","error":{"type":"error","error":{"type":"api_error","message":"x","code":7}}}}`)
	f.Add("\n\n{")
	f.Fuzz(func(t *testing.T, input string) {
		for _, p := range []llm.Protocol{llm.Anthropic, llm.OpenAI} {
			err := ParseResults(p, strings.NewReader(input), func(r Result) error {
				require.NotEmpty(t, r.CustomID)
				require.Contains(t, []ResultType{Succeeded, Errored, Canceled, Expired}, r.Type)
				if r.Type == Succeeded {
					require.Equal(t, 2, r.Status/100)
				}
				require.GreaterOrEqual(t, r.Usage.InputTokens, int64(0))
				return nil
			})
			if err != nil {
				require.ErrorIs(t, err, errResultLine)
			}
		}
	})
}
