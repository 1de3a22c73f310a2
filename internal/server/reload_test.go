package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/llm"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestReloadUnderLoad: while clients send requests without pause, a reload
// rotates a client key (old and new valid together, then the old one
// removed) and the upstream key; no request fails, the upstream sees the
// new key after the reload, and an invalid config or one that needs a
// restart is refused with the old config left whole.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	var seen sync.Map // upstream keys the provider saw
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		seen.Store(r.Header.Get("X-Api-Key"), true)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	cfgWith := func(upKey string, clients ...clients.Config) Config {
		return Config{Store: StoreNone, Listen: "127.0.0.1:0",
			Upstreams: []upcfg.Config{{Name: "claude", Protocol: llm.Anthropic, BaseURL: up.URL, APIKey: upKey}},
			Clients:   clients}
	}
	g, err := New(cfgWith("sk-old", clients.Config{Name: "web", Key: "ck-old"}, clients.Config{Name: "ops", Key: "ck-ops", Role: clients.RoleAdmin}),
		WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, g.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, g.Stop(context.Background())) })
	url := "http://" + g.Addr() + "/claude/v1/messages"

	var key atomic.Value // the key the load uses
	key.Store("ck-old")
	var failures, sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				code, body := call(t, "POST", url, key.Load().(string), anthropicBody)
				sent.Add(1)
				if code != http.StatusOK {
					failures.Add(1)
					t.Logf("failed: %d %s", code, body)
				}
			}
		})
	}
	waitSent := func(n int64) {
		target := sent.Load() + n
		require.Eventually(t, func() bool { return sent.Load() >= target }, 10*time.Second, time.Millisecond)
	}
	waitSent(20)
	// Step 1: the new client key beside the old one, and a new upstream key.
	require.NoError(t, g.Reload(cfgWith("sk-new", clients.Config{Name: "web", Key: "ck-old", Keys: []string{"ck-new"}},
		clients.Config{Name: "ops", Key: "ck-ops", Role: clients.RoleAdmin})))
	waitSent(20)
	key.Store("ck-new") // the callers move to the new key
	waitSent(20)
	// Step 2: the old client key goes.
	require.NoError(t, g.Reload(cfgWith("sk-new", clients.Config{Name: "web", Key: "ck-new"}, clients.Config{Name: "ops", Key: "ck-ops", Role: clients.RoleAdmin})))
	waitSent(20)

	// Refused: invalid, and a change that needs a restart; nothing changes.
	err = g.Reload(cfgWith("sk-newer", clients.Config{Name: "web", Key: "ck-new", Role: "root"}))
	require.ErrorContains(t, err, `clients[0].role: "root" is not admin or client`)
	bad := cfgWith("sk-newer", clients.Config{Name: "web", Key: "ck-new"})
	bad.MaxBodyBytes = 1
	require.ErrorIs(t, g.Reload(bad), ErrRestartNeeded)
	require.ErrorContains(t, g.Reload(bad), "max_body_bytes")
	waitSent(20)
	close(stop)
	wg.Wait()

	require.Zero(t, failures.Load(), "no request failed during the reloads (of %d)", sent.Load())
	code, _ := call(t, "POST", url, "ck-old", anthropicBody)
	require.Equal(t, http.StatusUnauthorized, code, "the removed key is refused")
	code, _ = call(t, "POST", url, "ck-ops", anthropicBody)
	require.Equal(t, http.StatusOK, code, "the refused reloads left the config whole")
	require.InDelta(t, 3, testutil.ToFloat64(g.reloads.total.WithLabelValues("refused")), 0, "every refused reload is counted")
	require.InDelta(t, 0, testutil.ToFloat64(g.reloads.last), 0, "the last one was refused")
	require.Positive(t, testutil.ToFloat64(g.reloads.total.WithLabelValues("applied")))
	_, newSeen := seen.Load("sk-new")
	require.True(t, newSeen, "the upstream got the new key")
	_, newerSeen := seen.Load("sk-newer")
	require.False(t, newerSeen)
	seen.Delete("sk-old")
	call(t, "POST", url, "ck-ops", anthropicBody)
	_, oldSeen := seen.Load("sk-old")
	require.False(t, oldSeen, "the old upstream key is no longer sent")
	require.True(t, strings.HasPrefix(g.Config().Upstreams[0].APIKey, "sk-old"), "Config is the config the server started with")
}
