package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenDestination means a webhook URL points at an address the
// gateway refuses to call.
var ErrForbiddenDestination = errors.New("webhook destination not allowed")

// Guard decides which addresses the gateway may send webhooks to, so that
// a client cannot make it call internal services (server-side request
// forgery):
//
//   - link-local addresses (169.254.0.0/16, fe80::/10: cloud metadata
//     services live there), the other metadata addresses
//     (fd00:ec2::254, 100.100.100.200), unspecified and multicast
//     addresses are refused always;
//   - loopback (127.0.0.0/8, ::1) and private ranges (10/8, 172.16/12,
//     192.168/16, 100.64/10, fc00::/7) are refused unless an Allow entry
//     covers them: a CIDR or IP that contains the address, or the URL's
//     host name itself;
//   - every other (public) address is allowed;
//   - an IPv6 address that carries an IPv4 one (NAT64 64:ff9b::/96 and
//     64:ff9b:1::/48, 6to4 2002::/16, Teredo 2001::/32, IPv4-compatible
//     ::a.b.c.d, and IPv4-mapped ::ffff:a.b.c.d) is judged as that
//     address too;
//   - a host written as an IPv4 address in a legacy form (2852039166,
//     0xa9fea9fe, 0251.0376.0251.0376, 127.1) is judged as the address
//     it denotes, not looked up.
//
// The check runs twice: on the URL when a job is submitted (CheckURL, the
// host name resolved), and on the address actually dialled (Transport,
// through net.Dialer.Control), so a name that resolved to a public address
// at submit and to a private one later (DNS rebinding) is still refused.
// A Guard is immutable and safe for concurrent use.
type Guard struct {
	prefixes []netip.Prefix
	hosts    map[string]bool
	resolver *net.Resolver
}

// alwaysRefused are the metadata addresses outside the link-local ranges.
var alwaysRefused = []netip.Prefix{
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS IMDS over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud metadata
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud metadata (legacy)
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("255.255.255.255/32"), // broadcast
}

// IPv6 ranges that carry an IPv4 address (embeddedIPv4).
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, the address at bits 48-88 less the u octet
	sixToFour      = netip.MustParsePrefix("2002::/16")      // RFC 3056, the address at bits 16-48
	teredo         = netip.MustParsePrefix("2001::/32")      // RFC 4380: server at bits 32-64, client inverted at 96-128
	ipv4Compatible = netip.MustParsePrefix("::/96")          // RFC 4291, deprecated
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address reaches through
// a translation or tunnel form (none for a plain address).
func embeddedIPv4(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	v4 := func(x [4]byte) netip.Addr { return netip.AddrFrom4(x) }
	switch {
	case nat64WellKnown.Contains(ip):
		return []netip.Addr{v4([4]byte{b[12], b[13], b[14], b[15]})}
	case nat64Local.Contains(ip):
		return []netip.Addr{v4([4]byte{b[6], b[7], b[9], b[10]})}
	case sixToFour.Contains(ip):
		return []netip.Addr{v4([4]byte{b[2], b[3], b[4], b[5]})}
	case teredo.Contains(ip):
		return []netip.Addr{v4([4]byte{b[4], b[5], b[6], b[7]}), v4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}
	case ipv4Compatible.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
		return []netip.Addr{v4([4]byte{b[12], b[13], b[14], b[15]})}
	}
	return nil
}

// sharedAddressSpace is 100.64.0.0/10 (carrier-grade NAT), private too.
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// NewGuard builds a Guard from allow entries: CIDRs ("10.0.0.0/8"), IPs
// ("127.0.0.1") or host names ("hooks.internal"). An invalid entry is an
// error naming it.
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}, resolver: net.DefaultResolver}
	for i, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return nil, fmt.Errorf("allow[%d]: empty entry", i)
		case strings.Contains(a, "/"):
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("allow[%d]: %q is not a CIDR: %w", i, a, err)
			}
			g.prefixes = append(g.prefixes, p.Masked())
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				g.prefixes = append(g.prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			g.hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
		}
	}
	return g, nil
}

// CheckIP reports whether ip may be called for a URL whose host is host
// (a name or an IP literal): nil, or an error wrapping
// ErrForbiddenDestination that says why.
func (g *Guard) CheckIP(host string, ip netip.Addr) error {
	ip = ip.Unmap()
	for _, v4 := range embeddedIPv4(ip) {
		// An IPv6 address that carries an IPv4 one (NAT64, 6to4, Teredo,
		// IPv4-compatible) reaches it: it is judged as that address.
		if err := g.CheckIP(host, v4); err != nil {
			return fmt.Errorf("%s embeds %s: %w", ip, v4, err)
		}
	}
	for _, p := range alwaysRefused {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is a metadata or reserved address", ErrForbiddenDestination, ip)
		}
	}
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("%w: %s is link-local (where cloud metadata services live)", ErrForbiddenDestination, ip)
	case ip.IsUnspecified(), ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return fmt.Errorf("%w: %s is not a unicast address", ErrForbiddenDestination, ip)
	}
	if !ip.IsLoopback() && !ip.IsPrivate() && !sharedAddressSpace.Contains(ip) {
		return nil
	}
	if g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return nil
	}
	for _, p := range g.prefixes {
		if p.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is a loopback or private address; add it (or the host %q) to jobs.webhooks.allow to permit it",
		ErrForbiddenDestination, ip, host)
}

// CheckURL checks a webhook URL at submit: an absolute http(s) URL whose
// host's every address passes CheckIP. Its errors do not name the field:
// the caller does ("webhook_url: …").
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an absolute http(s) URL, got %q", raw)
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return g.CheckIP(host, ip)
	}
	if ip, ok := legacyIPv4(host); ok {
		// 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518:
		// what a resolver's inet_aton makes of it, judged without asking
		// DNS (which fails or answers for such a name either way).
		return g.CheckIP(host, ip)
	}
	ips, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolving %q: %w", host, err)
	}
	for _, ip := range ips {
		if err := g.CheckIP(host, ip); err != nil {
			return err
		}
	}
	return nil
}

// legacyIPv4 reads host as inet_aton does: one to four parts separated by
// dots (a trailing dot allowed), each decimal, hexadecimal (0x…) or octal
// (0…), the last one filling the bytes the others leave. ok is false for a
// host of another form (a name).
func legacyIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var a uint32
	for i, p := range parts {
		v, ok := legacyIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 0xff {
				return netip.Addr{}, false
			}
			a |= uint32(v) << (24 - 8*i)
			continue
		}
		if bits := 8 * (5 - len(parts)); bits < 32 && v >= 1<<bits {
			return netip.Addr{}, false
		}
		a |= uint32(v)
	}
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), true
}

// legacyIPv4Part reads one part of legacyIPv4: at most 32 bits.
func legacyIPv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // "0x" is 0 to inet_aton
		}
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if p == "" || p[0] == '+' || p[0] == '-' {
		return 0, false
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}

// DialContext dials like a net.Dialer with timeout, refusing at connect
// time any address CheckIP refuses for the host being dialled.
func (g *Guard) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("%w: cannot read the dialled address %q", ErrForbiddenDestination, address)
				}
				return g.CheckIP(host, ap.Addr())
			}}
		return d.DialContext(ctx, network, addr)
	}
}

// Transport returns an HTTP transport for webhooks that dials through the
// guard and uses no proxy (a proxy would dial on the guard's behalf).
func (g *Guard) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext(30 * time.Second)
	return t
}
