package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		ready  bool
		want   string
	}{
		{"127.0.0.1:8080", false, "http://127.0.0.1:8080/livez"},
		{"0.0.0.0:8080", false, "http://127.0.0.1:8080/livez"},
		{":9000", true, "http://127.0.0.1:9000/readyz"},
		{"[::]:8080", false, "http://127.0.0.1:8080/livez"},
		{"[::1]:8080", true, "http://[::1]:8080/readyz"},
		{"gateway.internal:80", false, "http://gateway.internal:80/livez"},
	} {
		got, err := healthURL(tt.listen, tt.ready)
		require.NoError(t, err, tt.listen)
		require.Equal(t, tt.want, got, tt.listen)
	}
	_, err := healthURL("8080", false)
	require.Error(t, err)
}

// TestHealthProbesTheConfigsListenAddress: `sluice health --config` probes
// /livez (or /readyz with --ready) where the config listens, exits 0 on a
// 200 and 1, with one line, otherwise.
func TestHealthProbesTheConfigsListenAddress(t *testing.T) {
	t.Parallel()
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/livez":
			_, _ = w.Write([]byte(`{"live":true}` + "\n"))
		case "/readyz":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"ready":false}` + "\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer gw.Close()
	addr := strings.TrimPrefix(gw.URL, "http://")
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("listen: "+addr+"\nstore: none\n"+
		"upstreams:\n  - {name: anthropic, protocol: anthropic, api_key: sk-test}\n"), 0o600))

	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := runMain(context.Background(), append([]string{"health"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := run("--config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "healthy: GET "+gw.URL+"/livez: 200 OK {\"live\":true}\n", out)

	code, out, errOut = run("--config", cfg, "--ready")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Equal(t, "sluice health: GET "+gw.URL+"/readyz: 503 Service Unavailable {\"ready\":false}\n", errOut)

	code, _, errOut = run("--url", gw.URL+"/livez")
	require.Equal(t, 0, code, errOut)

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	code, _, errOut = run("--url", gone.URL+"/livez", "--timeout", "2s")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "sluice health: probing: ")
	require.Equal(t, 1, strings.Count(errOut, "\n"))
}

func TestConfigFileFromFlagOrEnvironment(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	require.Equal(t, "a.yaml", configFile("a.yaml", env(map[string]string{"SLUICE_CONFIG": "b.yaml"})))
	require.Equal(t, "b.yaml", configFile("", env(map[string]string{"SLUICE_CONFIG": "b.yaml"})))
	require.Empty(t, configFile("", env(nil)))
}
