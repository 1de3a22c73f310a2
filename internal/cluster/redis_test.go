package cluster_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/cluster/clustertest"
)

// redisURL returns SLUICE_TEST_REDIS_URL: skipped when it is unset,
// failed when it is set but the server is unreachable. Every test uses
// keys of its own, so tests share the database.
func redisURL(t testing.TB) string {
	url := os.Getenv("SLUICE_TEST_REDIS_URL")
	if url == "" {
		t.Skip("SLUICE_TEST_REDIS_URL is not set; skipping Redis tests")
	}
	b, err := cluster.OpenRedis(context.Background(), url)
	require.NoError(t, err, "SLUICE_TEST_REDIS_URL is set but Redis is unreachable")
	require.NoError(t, b.Close())
	return url
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	url := redisURL(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenRedis(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}

// TestConformanceMemory: the in-process backend the fake-clock tests use
// behaves as the stores do.
func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	clustertest.Run(t, func(t *testing.T) cluster.Backend { return cluster.NewMemory(nil) })
}
