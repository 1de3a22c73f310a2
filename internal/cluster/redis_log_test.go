package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRedisClientLogIsStructured: the Redis client library's messages
// become one JSON line each (msg "redis client"), not plain text.
func TestRedisClientLogIsStructured(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	redisLog{log: slog.New(slog.NewJSONHandler(&b, nil))}.Printf(context.Background(), "redis: %s:%d: connection refused\n", "127.0.0.1", 6379)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &rec), b.String())
	require.Equal(t, "redis client", rec["msg"])
	require.Equal(t, "WARN", rec["level"])
	require.Equal(t, "redis: 127.0.0.1:6379: connection refused", rec["message"])
}

// TestRedisPoolMessagesReachTheLog: the connection pool's own message (a
// dial that failed every retry) goes through SetRedisLogger's logger,
// the one path the gateway sets before it opens the store: nothing is
// printed as plain text.
//
// Not parallel: the Redis client's logger is global to the process.
func TestRedisPoolMessagesReachTheLog(t *testing.T) {
	var b syncBuffer
	SetRedisLogger(slog.New(slog.NewJSONHandler(&b, nil)))
	t.Cleanup(func() { SetRedisLogger(slog.New(slog.DiscardHandler)) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // a port nobody listens on
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = OpenRedis(ctx, "redis://"+addr+"/0")
	require.Error(t, err)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.NotEmpty(t, lines[0], "the pool said nothing")
	for _, l := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "a plain-text line: %q", l)
		require.Equal(t, "redis client", rec["msg"])
	}
	require.Contains(t, b.String(), "failed to dial")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
