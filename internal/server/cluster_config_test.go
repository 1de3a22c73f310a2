package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cluster"
	upcfg "github.com/sluicehq/sluice/upstream"
)

// TestClusterStoreSelection: cluster.store accepts PostgreSQL, Redis and
// off, names the field otherwise, and decides where the shared state
// lives.
func TestClusterStoreSelection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, jobs, store string
		want, wantErr     string
	}{
		{"postgres job store shares", "postgres://db/x", "", "postgres://db/x", ""},
		{"sqlite alone does not", "sqlite:./s.db", "", "", ""},
		{"redis", "sqlite:./s.db", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", ""},
		{"rediss with a prefix", "postgres://db/x", "rediss://h:6380/1?key_prefix=eu", "rediss://h:6380/1?key_prefix=eu", ""},
		{"off", "postgres://db/x", "off", "", ""},
		{"unknown", "sqlite:./s.db", "memcached://h", "", "cluster.store: want postgres://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := Config{Store: tc.jobs, Cluster: cluster.Config{Store: tc.store},
				Upstreams: []upcfg.Config{{Name: "a", Protocol: upcfg.Anthropic, APIKey: "k"}}}.WithDefaults()
			err := c.validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c.clusterStore())
		})
	}
}
