package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestSessionAffinityThroughGateway: over HTTP, on a pool of two keys, a
// conversation named by X-Sluice-Session (Anthropic) or by OpenAI's
// prompt_cache_key or user stays on one key for all its turns, and the
// conversations spread over both keys (x-sluice-key names the key).
func TestSessionAffinityThroughGateway(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path string
		body       func(s, turn int) string
		header     func(s int) map[string]string
	}{
		{"X-Sluice-Session", "/anthropic/v1/messages", func(_, turn int) string {
			return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"turn %d"}]}`, turn)
		}, func(s int) map[string]string {
			return map[string]string{frontdoor.HeaderSession: fmt.Sprintf("conv-%d", s)}
		}},
		{"prompt_cache_key", "/openai/v1/responses", func(s, turn int) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","max_output_tokens":16,"prompt_cache_key":"pck-%d","input":"turn %d"}`, s, turn)
		}, func(int) map[string]string { return nil }},
		{"user", "/openai/v1/chat/completions", func(s, turn int) string {
			return fmt.Sprintf(`{"model":"gpt-4.1","max_tokens":16,"user":"end-user-%d","messages":[{"role":"user","content":"turn %d"}]}`, s, turn)
		}, func(int) map[string]string { return nil }},
	}
	for _, tt := range tests {
		// A gateway each, so that no case starts on keys another used.
		f := startGateway(t, mock.Limits{}, 60, mock.Faults{}, func(u *upcfg.Config) {
			u.APIKey = ""
			u.APIKeys = []upcfg.Key{{Key: "sk-a-" + u.Name}, {Key: "sk-b-" + u.Name}}
			u.Limits.RequestsPerMinute = 60 // 60 deep, refilled 1 a second: the room tells the keys apart
		})
		base := "http://" + f.gateway.Addr()
		placed := map[int]map[string]bool{}
		used := map[string]bool{}
		for turn := range 3 {
			for s := range 3 {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+tt.path, strings.NewReader(tt.body(s, turn)))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/json")
				for k, v := range tt.header(s) {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode, tt.name)
				key := resp.Header.Get(frontdoor.HeaderKey)
				if placed[s] == nil {
					placed[s] = map[string]bool{}
				}
				placed[s][key], used[key] = true, true
			}
		}
		for s, keys := range placed {
			require.Len(t, keys, 1, "%s: conversation %d stays on one key: %v", tt.name, s, keys)
		}
		require.Len(t, used, 2, "%s: the conversations spread over both keys", tt.name)
	}
}
