package server

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// busyBody is the body a connection beyond max_connections gets, in the
// providers' error shape.
const busyBody = `{"type":"error","error":{"type":"overloaded_error","message":"the gateway has max_connections connections open; retry shortly"}}`

// busyAnswer is a complete HTTP/1.1 503 with busyBody; the connection is
// closed after it, so a client sees at once why (and when to retry)
// instead of hanging in the accept backlog.
var busyAnswer = "HTTP/1.1 503 Service Unavailable\r\n" +
	"Content-Type: application/json\r\n" +
	"Retry-After: 1\r\n" +
	"X-Should-Retry: true\r\n" +
	"Connection: close\r\n" +
	"Content-Length: " + strconv.Itoa(len(busyBody)) + "\r\n\r\n" + busyBody

// busyWriteTimeout bounds the write of busyAnswer to a refused connection.
const busyWriteTimeout = time.Second

// limitListener accepts at most max connections at once; beyond that it
// answers each new connection busyAnswer and closes it, and keeps
// accepting (unlike netutil.LimitListener, which stops accepting and lets
// connections wait unanswered).
type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

func newLimitListener(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: int64(max)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		go refuseBusy(c)
	}
}

func refuseBusy(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(busyWriteTimeout)) //nolint:forbidigo // a socket deadline is wall time
	_, _ = c.Write([]byte(busyAnswer))
	_ = c.Close()
}

// countedConn gives its slot back once, when closed.
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
