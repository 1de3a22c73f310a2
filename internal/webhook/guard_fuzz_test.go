package webhook

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// ipv6Forms are the IPv6 addresses through which v4 is reached: mapped,
// IPv4-compatible, NAT64 (well-known and local-use), 6to4, and Teredo
// with v4 as its server or as its (inverted) client. Built here from the
// RFCs' layouts, not from the guard's own table.
func ipv6Forms(v4 netip.Addr, salt uint64) []netip.Addr {
	a := v4.As4()
	var forms []netip.Addr
	at := func(prefix []byte, off int) {
		var b [16]byte
		copy(b[:], prefix)
		copy(b[off:], a[:])
		forms = append(forms, netip.AddrFrom16(b))
	}
	at([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 12) // ::ffff:a.b.c.d
	if a != [4]byte{0, 0, 0, 0} && a != [4]byte{0, 0, 0, 1} {
		at(nil, 12) // ::a.b.c.d (:: and ::1 are themselves)
	}
	at([]byte{0x00, 0x64, 0xff, 0x9b}, 12) // 64:ff9b::/96
	var local [16]byte                     // 64:ff9b:1::/48, the u octet (bits 64-72) skipped
	copy(local[:], []byte{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01})
	local[6], local[7], local[9], local[10] = a[0], a[1], a[2], a[3]
	forms = append(forms, netip.AddrFrom16(local))
	var sixToFour [16]byte // 2002:AABB:CCDD::/48, the rest free
	sixToFour[0], sixToFour[1] = 0x20, 0x02
	copy(sixToFour[2:], a[:])
	binary.BigEndian.PutUint64(sixToFour[8:], salt)
	forms = append(forms, netip.AddrFrom16(sixToFour))
	var server, client [16]byte // 2001:0:SERVER:flags:port:^CLIENT
	server[0], server[1], client[0], client[1] = 0x20, 0x01, 0x20, 0x01
	copy(server[4:], a[:])
	binary.BigEndian.PutUint32(server[12:], 0x5db8d70e^0xffffffff) // client 93.184.215.14, public
	copy(client[4:], []byte{93, 184, 215, 14})                     // server public
	for i := range 4 {
		client[12+i] = ^a[i]
	}
	forms = append(forms, netip.AddrFrom16(server), netip.AddrFrom16(client))
	return forms
}

// FuzzGuardEmbeddedIPv4: an IPv6 form of an IPv4 address is never allowed
// where the address itself is refused, whatever the allow list.
func FuzzGuardEmbeddedIPv4(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "127.0.0.1", "10.0.0.5", "93.184.215.14", "0.0.0.0", "100.100.100.200", "255.255.255.255"} {
		a := netip.MustParseAddr(s).As4()
		f.Add(a[0], a[1], a[2], a[3], uint64(0), false)
		f.Add(a[0], a[1], a[2], a[3], uint64(1), true)
	}
	open, err := NewGuard(nil)
	require.NoError(f, err)
	allowLoop, err := NewGuard([]string{"127.0.0.0/8", "::1"})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, a, b, c, d byte, salt uint64, loop bool) {
		g := open
		if loop {
			g = allowLoop
		}
		v4 := netip.AddrFrom4([4]byte{a, b, c, d})
		plain := g.CheckIP("h", v4)
		for _, ip := range ipv6Forms(v4, salt) {
			if plain != nil {
				require.ErrorIs(t, g.CheckIP("h", ip), ErrForbiddenDestination, "%s reaches %s, refused: %v", ip, v4, plain)
			}
		}
	})
}

// FuzzGuardCheckURL: any string is answered without a panic; a URL the
// guard allows is http(s) with a host, and a host that is an address (in
// any form the guard reads) is not loopback, private, link-local,
// unspecified or multicast.
func FuzzGuardCheckURL(f *testing.F) {
	for _, s := range []string{
		"http://169.254.169.254/", "http://[::ffff:a9fe:a9fe]/", "http://[64:ff9b::7f00:1]/",
		"http://2852039166/", "http://0x7f.1:80/", "https://93.184.215.14/hook", "http://[fe80::1%25eth0]/",
		"file:///etc/passwd", "http://127.0.0.1.:9/", "http://0251.0376.0251.0376/",
	} {
		f.Add(s)
	}
	g, err := NewGuard(nil)
	require.NoError(f, err)
	// No DNS: a name is answered from /etc/hosts or refused.
	g.resolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in this test")
	}}
	f.Fuzz(func(t *testing.T, raw string) {
		if g.CheckURL(context.Background(), raw) != nil {
			return
		}
		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.Contains(t, []string{"http", "https"}, u.Scheme)
		host := u.Hostname()
		ip, err := netip.ParseAddr(host)
		if err != nil {
			var ok bool
			if ip, ok = legacyIPv4(host); !ok {
				return // a name from /etc/hosts
			}
		}
		ip = ip.Unmap()
		require.False(t, ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast(),
			"%q allowed: %s", raw, ip)
	})
}
