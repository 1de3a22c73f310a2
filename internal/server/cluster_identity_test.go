package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/clients"
	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/cluster"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/opsview"
)

// TestClusterStatusShowsARenamedNode: two gateways configured with one
// cluster.node_id on one cluster.Memory (their client limits' syncs, run
// by hand on a fake clock, are where they meet). One of them takes a
// fresh id: /v1/status's cluster section shows the id in use beside the
// configured one and the other process's incarnation, and /readyz's
// cluster check says so; the other keeps the configured id.
func TestClusterStatusShowsARenamedNode(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := cluster.NewMemory(clk)
	clients := []clients.Config{{Name: "a", Key: "ck-a", Limits: admit.ClientLimits{LimitValues: admit.LimitValues{RequestsPerMinute: 60}}}}
	nodes := []*clusterNode{newClusterNode(t, clk, mem, "gw", clients, nil), newClusterNode(t, clk, mem, "gw", clients, nil)}
	for _, n := range nodes {
		h, err := n.admitJob("a", 10, 10) // joins the client's key (held back or not)
		if err == nil {
			h.Settle(dispatch.End{}, true)
			continue
		}
		var held *admit.HeldError
		require.ErrorAs(t, err, &held)
	}
	for range 2 {
		for _, n := range nodes {
			n.sync(t.Context())
		}
		clk.Advance(time.Second)
	}
	var kept, renamed *opsview.ClusterStatus
	for _, n := range nodes {
		cs := n.srv.view.ClusterStatus()
		require.NotNil(t, cs)
		require.Equal(t, "gw", cs.ConfiguredNode)
		require.NotEmpty(t, cs.Incarnation)
		b, err := json.Marshal(cs)
		require.NoError(t, err)
		require.Contains(t, string(b), `"configured_node":"gw"`)
		if cs.Node == "gw" {
			kept = cs
		} else {
			renamed = cs
		}
	}
	require.NotNil(t, kept, "one keeps the configured id")
	require.NotNil(t, renamed, "the other takes a fresh one")
	require.True(t, strings.HasPrefix(renamed.Node, "gw-"), renamed.Node)
	require.Equal(t, kept.Incarnation, renamed.DuplicateOf)
	require.NotNil(t, renamed.RenamedAt)
	require.Empty(t, kept.DuplicateOf)
	require.Nil(t, kept.RenamedAt)
	for _, n := range nodes {
		c, ok := n.srv.clusterCheck()
		require.True(t, ok)
		require.True(t, c.OK, "a renamed node serves on")
		if n.srv.admit.ClusterNodeID() == "gw" {
			require.Equal(t, "sharing quotas as node gw", c.Detail)
		} else {
			require.Contains(t, c.Detail, "node_id gw is in use by another process")
		}
	}
}
