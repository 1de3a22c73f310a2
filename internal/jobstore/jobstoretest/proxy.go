package jobstoretest

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Proxy is a TCP proxy a test puts between a store and its database
// server to make the server unreachable and reachable again, without
// stopping a server other tests share. Cut closes every connection and
// refuses new ones (they are accepted and closed at once, as a stopped
// server's port answers); Restore lets them through again.
type Proxy struct {
	upstream string
	ln       net.Listener
	wg       sync.WaitGroup

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// NewProxy listens on a free loopback port and forwards to upstream
// (host:port). It is closed at the end of the test.
func NewProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every proxied connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore lets new connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// track registers c unless the proxy is cut.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) serve(c net.Conn) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, up) {
		_ = c.Close()
		_ = up.Close()
		return
	}
	defer p.untrack(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with an error when Cut closes the pair
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// OpenBehindProxy opens the PostgreSQL store at dsn through a new Proxy
// (with a 2 s connect timeout, so a cut answers fast), closed at the end of
// the test, and returns both.
func OpenBehindProxy(t *testing.T, dsn string, maxConns int) (jobstore.Store, *Proxy) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("proxy: parsing the DSN: %v", err)
	}
	p := NewProxy(t, u.Host)
	u.Host = p.Addr()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	st, err := jobstore.Open(context.Background(), u.String(), jobstore.Options{MaxConns: maxConns})
	if err != nil {
		t.Fatalf("proxy: opening the store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	return st, p
}
