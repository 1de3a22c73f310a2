package server

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

const scrapeKey = "scrape-key-0123456789"

// TestMetricsAuth: with clients configured /metrics names them and their
// spend, so it needs an admin key or the scrape key (401 JSON without, 403
// for a client that is not an admin); metrics.public and an open gateway
// serve it to anyone.
func TestMetricsAuth(t *testing.T) {
	t.Parallel()
	closed := newTestServer(t, adminClients, func(c *Config) { c.Metrics.ScrapeKey = scrapeKey })
	public := newTestServer(t, adminClients, func(c *Config) { c.Metrics.Public = true })
	noScrape := newTestServer(t, adminClients)
	open := newTestServer(t, nil)
	for _, tc := range []struct {
		name   string
		ts     *testServer
		h      map[string]string
		status int
	}{
		{"anonymous", closed, nil, 401},
		{"wrong key", closed, map[string]string{"Authorization": "Bearer nope"}, 401},
		{"client", closed, map[string]string{"x-api-key": webKey}, 403},
		{"admin", closed, map[string]string{"x-api-key": opsKey}, 200},
		{"scrape key as bearer", closed, map[string]string{"Authorization": "Bearer " + scrapeKey}, 200},
		{"scrape key not configured", noScrape, map[string]string{"Authorization": "Bearer " + scrapeKey}, 401},
		{"anonymous without a scrape key", noScrape, nil, 401},
		{"public", public, nil, 200},
		{"open gateway", open, nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, b := tc.ts.do(t, "GET", "/metrics", "", tc.h)
			require.Equal(t, tc.status, r.StatusCode, string(b))
			if tc.status == http.StatusOK {
				require.Contains(t, string(b), "sluice_config_reloads_total")
				return
			}
			require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			typ, msg := apiErrorType(t, b)
			require.Contains(t, []string{"authentication_error", "permission_error"}, typ)
			require.NotContains(t, string(b), "web\"", "the refusal names no other client")
			require.NotEmpty(t, msg)
		})
	}
}

// TestMetricsConfig: the switches' errors name the field.
func TestMetricsConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m   MetricsConfig
		err string
	}{
		{MetricsConfig{Public: true, ScrapeKey: scrapeKey}, "metrics.scrape_key: not used with public"},
		{MetricsConfig{ScrapeKey: "short"}, "metrics.scrape_key: must be at least 16"},
	} {
		_, err := New(Config{Clients: adminClients, Metrics: tc.m, Store: StoreNone,
			Upstreams: newTestServer(t, nil).srv.cfg.Upstreams})
		require.ErrorContains(t, err, tc.err)
	}
}
