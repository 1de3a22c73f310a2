package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestPastDeadlineIsABadRequestOnEveryRoute: a deadline already past is
// the client's mistake, answered 400 invalid_request_error in the route's
// own error shape, on the Anthropic and OpenAI proxy routes
// (X-Sluice-Deadline), the jobs API and a batch (their deadline): never a
// 429, never queued, nothing sent upstream.
func TestPastDeadlineIsABadRequestOnEveryRoute(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	g, err := New(Config{Store: testStore(t), Listen: "127.0.0.1:0", Upstreams: []upcfg.Config{
		{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(), APIKey: "sk-a"},
		{Name: "gpt", Protocol: llm.OpenAI, BaseURL: m.URL(), APIKey: "sk-o"}}}, WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()
	const past = "2000-01-01T00:00:00Z"
	claude := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	gpt := `{"model":"gpt-4.1","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, path, header, body string
		// anthropic: the Anthropic error shape ({"type":"error","error":…}),
		// else the OpenAI / jobs API one ({"error":…}).
		anthropic bool
	}{
		{"Anthropic messages", "/claude/v1/messages", past, claude, true},
		{"Anthropic messages, a negative duration", "/claude/v1/messages", "-5s", claude, true},
		{"OpenAI chat completions", "/gpt/v1/chat/completions", past, gpt, false},
		{"jobs API", "/v1/jobs", "", `{"upstream":"claude","deadline":"` + past + `","request":` + claude + `}`, false},
		{"a batch", "/v1/batches?upstream=claude&deadline=" + past, "", `{"custom_id":"a","params":` + claude + "}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if tc.header != "" {
				req.Header.Set("X-Sluice-Deadline", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, "invalid_request_error", e.Error.Type)
			if tc.anthropic {
				require.Equal(t, "error", e.Type, "Anthropic's error envelope")
			}
			require.Regexp(t, `past|positive`, e.Error.Message)
		})
	}
	t.Cleanup(func() { require.Empty(t, m.Stats().Overall.ByStatus, "nothing was sent upstream") })
}
