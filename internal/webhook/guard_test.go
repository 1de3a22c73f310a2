package webhook

import (
	"context"
	"errors"
	"net"
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
		{"NAT64 metadata", allowLoop, "http://[64:ff9b::a9fe:a9fe]/", false},
		{"NAT64 loopback", open, "http://[64:ff9b::7f00:1]/", false},
		{"NAT64 local-use loopback", open, "http://[64:ff9b:1:7f00:0:100::]/", false},
		{"6to4 metadata", allowLoop, "http://[2002:a9fe:a9fe::1]/", false},
		{"6to4 loopback", open, "http://[2002:7f00:1::]/", false},
		{"Teredo client loopback", open, "http://[2001:0:5db8:a9fe:0:0:80ff:fffe]/", false},
		{"IPv4-compatible metadata", allowLoop, "http://[::169.254.169.254]/", false},
		{"IPv4-compatible loopback", open, "http://[::127.0.0.1]/", false},
		{"NAT64 public", open, "http://[64:ff9b::5db8:d70e]/", true},
		{"NAT64 loopback allowed with loopback", allowLoop, "http://[64:ff9b::7f00:1]/", true},
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

// TestGuardNumericHosts: a host written as an IPv4 address in the legacy
// forms that resolvers and browsers accept (one decimal number, hex or
// octal parts, fewer than four parts) is judged as that address, without
// a DNS look-up that might fail, or answer, either way.
func TestGuardNumericHosts(t *testing.T) {
	t.Parallel()
	open, err := NewGuard(nil)
	require.NoError(t, err)
	for _, host := range []string{
		"2852039166",          // 169.254.169.254
		"0xa9fea9fe",          // 169.254.169.254
		"0251.0376.0251.0376", // 169.254.169.254
		"169.254.43518",       // 169.254.169.254
		"2130706433",          // 127.0.0.1
		"0x7f.1",              // 127.0.0.1
		"0177.0.0.1",          // 127.0.0.1
		"127.1",               // 127.0.0.1
		"017700000001",        // 127.0.0.1
		"0",                   // 0.0.0.0
		"0x0A.0.0.5",          // 10.0.0.5
	} {
		t.Run(host, func(t *testing.T) {
			t.Parallel()
			err := open.CheckURL(context.Background(), "http://"+host+"/hook")
			require.ErrorIs(t, err, ErrForbiddenDestination)
		})
	}
	allowLoop, err := NewGuard([]string{"127.0.0.0/8"})
	require.NoError(t, err)
	require.NoError(t, allowLoop.CheckURL(context.Background(), "http://2130706433:9000/hook"), "loopback in decimal, allowed as loopback")
	require.NoError(t, open.CheckURL(context.Background(), "http://1572395022/hook"), "a public address in decimal (93.184.215.14)")
}

// TestGuardErrorsLeaveTheFieldToTheCaller: the jobs API prefixes the
// guard's error with "webhook_url: ", so the guard's own message must not
// (it read "webhook_url: webhook_url: resolving …", issue 27).
func TestGuardErrorsLeaveTheFieldToTheCaller(t *testing.T) {
	t.Parallel()
	g, err := NewGuard(nil)
	require.NoError(t, err)
	g.resolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in this test")
	}}
	for _, raw := range []string{"ftp://example.com/", "http://no-such-host.invalid/", "http://127.0.0.1/"} {
		err := g.CheckURL(context.Background(), raw)
		require.Error(t, err, raw)
		require.NotContains(t, err.Error(), "webhook_url", raw)
	}
}
