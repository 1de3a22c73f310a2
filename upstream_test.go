package sluice_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/upstream"
)

// TestUpstreamDecodesTheGatewaysYAML: an entry of the gateway's
// upstreams: list, api_keys as plain strings and objects mixed, decodes
// into sluice.Upstream (the gateway's own type) and drives a Transport:
// the first key, revoked, is taken out of the pool and the request is
// served with the second.
func TestUpstreamDecodesTheGatewaysYAML(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("x-api-key")
		mu.Lock()
		seen = append(seen, key)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if key != "sk-2" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	t.Cleanup(up.Close)

	doc := `
name: claude
protocol: anthropic
base_url: ` + up.URL + `
api_keys: ["sk-1", {key: sk-2, org: a}]
`
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	var cfg sluice.Upstream
	require.NoError(t, dec.Decode(&cfg))
	require.Equal(t, []sluice.Key{{Key: "sk-1"}, {Key: "sk-2", Org: "a"}}, cfg.APIKeys)
	require.Equal(t, sluice.Anthropic, cfg.Protocol)
	require.NoError(t, cfg.Validate())

	tr, err := sluice.NewTransport(cfg)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, tr.Stop(context.Background())) })
	req, err := http.NewRequestWithContext(context.Background(), "POST", "http://x/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"sk-1", "sk-2"}, seen, "both keys of the pool, the revoked one first")
}

// TestTransportRefusesFallbacks: a Transport serves one upstream, so the
// gateway's fallbacks are refused rather than ignored.
func TestTransportRefusesFallbacks(t *testing.T) {
	t.Parallel()
	_, err := sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic,
		Fallbacks: []upstream.Fallback{{Upstream: "b"}}})
	require.ErrorContains(t, err, `upstream "a": fallbacks: `)
	_, err = sluice.NewTransport(sluice.Upstream{Name: "a", Protocol: sluice.Anthropic, FallbackClasses: []string{"high"}})
	require.ErrorContains(t, err, `upstream "a": fallbacks: `)
}
