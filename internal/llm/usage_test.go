package llm_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
)

// TestUsageJSON: the fields added for issue 25 are omitted when zero, so a
// usage without them encodes as it always did (job views, stored results).
func TestUsageJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		u    llm.Usage
		want string
	}{
		{"before issue 25", llm.Usage{InputTokens: 7, OutputTokens: 3, CacheReadInputTokens: 2},
			`{"input_tokens":7,"output_tokens":3,"cache_read_input_tokens":2}`},
		{"cache split, reasoning, tier", llm.Usage{InputTokens: 3, OutputTokens: 9, CacheCreationInputTokens: 30,
			CacheCreation5mInputTokens: 10, CacheCreation1hInputTokens: 20, ReasoningTokens: 4, ServiceTier: "priority"},
			`{"input_tokens":3,"output_tokens":9,"cache_creation_input_tokens":30,"cache_creation_5m_input_tokens":10,"cache_creation_1h_input_tokens":20,"reasoning_tokens":4,"service_tier":"priority"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(tt.u)
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(b))
			var back llm.Usage
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, tt.u, back)
		})
	}
}
