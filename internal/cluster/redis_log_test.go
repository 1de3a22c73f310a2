package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

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
