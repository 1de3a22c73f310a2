package cluster_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/cluster/clustertest"
	"github.com/sluicehq/sluice/internal/jobstore/jobstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	dsn := jobstoretest.PostgresDSN(t)
	clustertest.Run(t, func(t *testing.T) cluster.Backend {
		b, err := cluster.OpenPostgres(context.Background(), dsn)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	})
}
