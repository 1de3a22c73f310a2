package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHealthAndUnknownRoutes: /livez and /readyz answer (no redirect), an
// unknown path is a 404 and a wrong method on the gateway's own routes a
// 405, both as JSON errors.
func TestHealthAndUnknownRoutes(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, func(c *Config) { c.Store = StoreNone })
	tests := []struct {
		method, path string
		status       int
		contains     string
	}{
		{http.MethodGet, "/livez", 200, `"live":true`},
		{http.MethodGet, "/readyz", 200, `"ready":true`},
		{http.MethodGet, "/healthz", 200, "ok"},
		{http.MethodGet, "/foo", 404, "no such route: /foo"},
		{http.MethodGet, "/foo/bar", 404, "no such route: /foo/bar"},
		{http.MethodPost, "/v1/status", 405, "method POST is not allowed on /v1/status"},
		{http.MethodDelete, "/readyz", 405, "not allowed"},
		{http.MethodGet, "/ui", 200, "<title>Sluice</title>"},
		{http.MethodGet, "/ui/app.js", 200, "/v1/status/history"},
		{http.MethodPost, "/ui", 405, "not allowed on /ui"},
		{http.MethodGet, "/ui/nope.js", 404, "no such route: /ui/nope.js"},
		{http.MethodGet, "/ui/", 200, "<title>Sluice</title>"},
		{http.MethodDelete, "/v1/status/history", 405, "not allowed"},
	}
	for _, tt := range tests {
		r, body := ts.do(t, tt.method, tt.path, "", nil)
		require.Equal(t, tt.status, r.StatusCode, "%s %s: %s", tt.method, tt.path, body)
		require.Contains(t, string(body), tt.contains, "%s %s", tt.method, tt.path)
		if tt.status >= 400 {
			var v struct {
				Error struct{ Type, Message string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &v), "%s", body)
			require.NotEmpty(t, v.Error.Message)
		}
		if tt.status == 405 {
			require.Equal(t, "GET, HEAD", r.Header.Get("Allow"))
		}
	}
}

// TestReadyzNamesEveryCheck: the store and each upstream are named.
func TestReadyzNamesEveryCheck(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, func(c *Config) { c.Store = StoreNone })
	_, body := ts.do(t, http.MethodGet, "/readyz", "", nil)
	var rr ReadyResponse
	require.NoError(t, json.Unmarshal(body, &rr))
	require.True(t, rr.Ready)
	var names []string
	for _, c := range rr.Checks {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"store", "upstream a", "upstream o"}, names)
	require.Equal(t, "disabled (store: none)", rr.Checks[0].Detail)
}

// TestReadyzStates: every check has a state, and a gateway shutting
// down fails readiness with a failed "server" check (a store not
// connected yet, degraded and still ready, is
// cmd/sluice's TestServeStartsWithoutItsStores).
func TestReadyzStates(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, nil, func(c *Config) { c.Store = StoreNone })
	_, body := ts.do(t, http.MethodGet, "/readyz", "", nil)
	var rr ReadyResponse
	require.NoError(t, json.Unmarshal(body, &rr))
	for _, c := range rr.Checks {
		require.Equal(t, CheckOK, c.State, "%s", body)
		require.True(t, c.OK)
	}
	ts.srv.draining.Store(true)
	r, body := ts.do(t, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode, "%s", body)
	rr = ReadyResponse{}
	require.NoError(t, json.Unmarshal(body, &rr))
	require.False(t, rr.Ready)
	require.Equal(t, ReadyCheck{Name: "server", State: CheckFailed, Detail: "shutting down: finishing the requests in flight"}, rr.Checks[0])
}
