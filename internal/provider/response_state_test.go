package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

func TestParseResponseState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		want     provider.ResponseState
		terminal bool
	}{
		{"completed", responsesObject, provider.ResponseState{ID: "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b", Status: "completed",
			Usage: llm.Usage{InputTokens: 36, OutputTokens: 87, ServiceTier: "flex"}, HasUsage: true}, true},
		{"queued background", `{"id":"resp_1","object":"response","status":"queued","background":true,"usage":null,"error":null}`,
			provider.ResponseState{ID: "resp_1", Status: "queued", Background: true}, false},
		{"incomplete", `{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":16}}`,
			provider.ResponseState{ID: "resp_1", Status: "incomplete", IncompleteReason: "max_output_tokens", Usage: llm.Usage{InputTokens: 3, OutputTokens: 16}, HasUsage: true}, true},
		{"failed", `{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"boom"}}`,
			provider.ResponseState{ID: "resp_1", Status: "failed", ErrorCode: "server_error", ErrorMessage: "boom"}, true},
		{"cancelled", `{"id":"resp_1","status":"cancelled","background":true}`, provider.ResponseState{ID: "resp_1", Status: "cancelled", Background: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := provider.ParseResponseState([]byte(tt.body))
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.terminal, got.Terminal())
		})
	}
	for _, bad := range []string{openAI500, `{"id":"resp_1"}`, `{"id":1,"status":"x"}`, `[`} {
		_, err := provider.ParseResponseState([]byte(bad))
		require.Error(t, err, bad)
	}
}

func FuzzParseResponseState(f *testing.F) {
	for _, s := range []string{responsesObject, `{"id":"r","status":"failed","error":{"code":5}}`, `{"id":"r","status":"queued","incomplete_details":[1]}`, openAI500} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s, err := provider.ParseResponseState([]byte(body))
		if err != nil {
			require.Equal(t, provider.ResponseState{}, s)
			return
		}
		u, ok := provider.ParseUsage(llm.OpenAI, []byte(body))
		require.Equal(t, ok, s.HasUsage)
		require.Equal(t, u, s.Usage)
	})
}
