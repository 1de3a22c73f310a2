package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGuardCheckURL(t *testing.T) {
	t.Parallel()
	open, err := NewGuard(nil)
	require.NoError(t, err)
	allowLoop, err := NewGuard([]string{"127.0.0.0/8", "::1"})
	require.NoError(t, err)
	allowHost, err := NewGuard([]string{"localhost", "10.1.2.3"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		g     *Guard
		url   string
		allow bool
	}{
		{"metadata IP", open, "http://169.254.169.254/latest/meta-data/", false},
		{"metadata IP even when loopback is allowed", allowLoop, "http://169.254.169.254/", false},
		{"link-local v6", allowLoop, "http://[fe80::1]/", false},
		{"AWS IMDS v6", open, "http://[fd00:ec2::254]/", false},
		{"mapped metadata", open, "http://[::ffff:169.254.169.254]/", false},
		{"unspecified", allowLoop, "http://0.0.0.0:8080/", false},
		{"loopback IP", open, "http://127.0.0.1:9000/hook", false},
		{"loopback name", open, "http://localhost:9000/hook", false},
		{"private", open, "https://10.0.0.5/hook", false},
		{"CGNAT", open, "https://100.64.1.1/hook", false},
		{"loopback allowed by CIDR", allowLoop, "http://127.0.0.1:9000/hook", true},
		{"loopback name allowed by CIDR", allowLoop, "http://localhost:9000/hook", true},
		{"loopback name allowed by host", allowHost, "http://localhost:9000/hook", true},
		{"private allowed by IP", allowHost, "http://10.1.2.3/hook", true},
		{"other private not allowed", allowHost, "http://10.1.2.4/hook", false},
		{"public", open, "https://93.184.215.14/hook", true},
		{"not http", open, "file:///etc/passwd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.g.CheckURL(context.Background(), tc.url)
			if tc.allow {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestGuardAtConnect: the transport refuses a loopback address at dial time
// even when the URL was never checked (a name that resolved elsewhere at
// submit: DNS rebinding), and allows it when the config does.
func TestGuardAtConnect(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	t.Cleanup(srv.Close)
	g, err := NewGuard(nil)
	require.NoError(t, err)
	c := &http.Client{Transport: g.Transport()}
	resp, err := c.Get(srv.URL) //nolint:noctx // a test
	if err == nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrForbiddenDestination)

	ok, err := NewGuard([]string{"127.0.0.1"})
	require.NoError(t, err)
	c = &http.Client{Transport: ok.Transport()}
	resp, err = c.Get(srv.URL) //nolint:noctx // a test
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 204, resp.StatusCode)
	require.Error(t, g.CheckIP("example.com", netip.MustParseAddr("127.0.0.1")), "a public name resolving to loopback")
}

func TestNewGuardRejectsBadEntries(t *testing.T) {
	t.Parallel()
	_, err := NewGuard([]string{"10.0.0.0/33"})
	require.ErrorContains(t, err, "allow[0]")
	_, err = NewGuard([]string{""})
	require.ErrorContains(t, err, "allow[0]: empty")
}
