package server

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/sluicehq/sluice/internal/admit"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/jobs"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/mock"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNoSecretAnywhere drives every kind of answer the gateway gives
// (success, 401, 403, 404, 409, 400, 429, status for an admin, metrics,
// job views with their request, batch results, a refused reload) with
// debug logs on, and greps all of it for every secret in the config:
// client keys, upstream keys, the webhook secret.
func TestNoSecretAnywhere(t *testing.T) {
	t.Parallel()
	m, err := mock.New(mock.Config{Listen: "127.0.0.1:0", OutputTokens: mock.OutputRange{Min: 2, Max: 2}, Seed: 1})
	require.NoError(t, err)
	require.NoError(t, m.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, m.Stop(context.Background())) })
	secrets := []string{"ck-SECRET-alice-123", "ck-SECRET-alice-456", "ck-SECRET-root-789", "sk-SECRET-upstream-1", "sk-SECRET-upstream-2", "whsec-SECRET-abc"}
	var logs lockedBuffer
	cfg := Config{Store: testStore(t), Listen: "127.0.0.1:0",
		Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: m.URL(),
			APIKeys: []upcfg.Key{{Key: secrets[3]}, {Key: secrets[4]}}}},
		Clients: []clients.Config{{Name: "alice", Key: secrets[0], Keys: []string{secrets[1]},
			Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60}}},
			{Name: "root", Key: secrets[2], Role: clients.RoleAdmin}},
		Jobs: jobs.Settings{WebhookSecret: secrets[5]}}
	g, err := New(cfg, WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	base := "http://" + g.Addr()

	var seen strings.Builder
	do := func(method, path, key, body string) []byte {
		code, b := call(t, method, base+path, key, body)
		seen.WriteString(method + " " + path + " " + http.StatusText(code) + "\n")
		seen.Write(b)
		return b
	}
	alice, root := secrets[0], secrets[2]
	do("POST", "/claude/v1/messages", alice, tenantJobBody)
	do("POST", "/claude/v1/messages", alice, tenantJobBody) // over alice's 60 rpm: 429 or a wait
	do("POST", "/claude/v1/messages", "ck-wrong", tenantJobBody)
	do("POST", "/claude/v1/messages", alice, `{"bad":`)
	do("GET", "/claude/v1/models", root, "")
	b := do("POST", "/v1/jobs", alice, `{"upstream":"claude","idempotency_key":"k","request":`+tenantJobBody+`}`)
	var j struct {
		ID json.Number `json:"id"`
	}
	require.NoError(t, json.Unmarshal(b, &j))
	do("GET", "/v1/jobs/"+j.ID.String()+"?wait=10s&include=request", alice, "")
	do("GET", "/v1/jobs/"+j.ID.String()+"?include=request", root, "")
	do("GET", "/v1/jobs?client=alice", root, "")
	do("POST", "/v1/jobs", alice, `{"upstream":"claude","idempotency_key":"k","request":{"model":"x","max_tokens":1,"messages":[{"role":"user","content":"other"}]}}`)
	do("POST", "/v1/jobs/retry", alice, `{"all":true}`)
	do("POST", "/v1/upstreams/claude/pause", alice, "")
	do("GET", "/v1/jobs/"+j.ID.String(), "", "")
	do("POST", "/v1/batches?upstream=claude", alice, `{"custom_id":"a","params":`+tenantJobBody+`}`)
	do("GET", "/v1/status", root, "")
	do("GET", "/v1/status", alice, "")
	do("GET", "/metrics", "", "") // refused: no key
	do("GET", "/metrics", root, "")
	bad := cfg
	bad.Clients = []clients.Config{{Name: "alice", Key: secrets[0], Role: "root"}, {Name: "bob", Key: secrets[0]}}
	if err := g.Reload(bad); err != nil {
		seen.WriteString(err.Error())
	}
	_, err = New(bad)
	require.Error(t, err)
	seen.WriteString(err.Error())

	all := seen.String() + logs.String()
	require.Contains(t, all, "alice", "the test saw the answers")
	for _, s := range secrets {
		require.NotContains(t, all, s, "a secret leaked")
	}
}
