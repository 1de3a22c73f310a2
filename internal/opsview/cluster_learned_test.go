package opsview

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/flow"
)

// TestClusterLearnedStatus: /v1/status shows a shared limit with its node
// and time, and a remaining only when one was reported.
func TestClusterLearnedStatus(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	tests := []struct {
		name string
		in   flow.ClusterReport
		want string
	}{
		{"limit only", flow.ClusterReport{Account: "ab12", Dim: flow.Requests, LimitNode: "a",
			Heard: flow.Heard{Limit: 600, LimitAt: at, Remaining: -1}},
			`{"key":"ab12","dimension":"requests","limit":600,"learned_at":"2026-03-01T11:00:00Z","limit_node":"a"}`},
		{"remaining only", flow.ClusterReport{Account: "ab12", Dim: flow.OutputTokens, RemainingNode: "b",
			Heard: flow.Heard{Remaining: 0, SentAt: at, At: at.Add(time.Second), Reset: at.Add(time.Minute)}},
			`{"key":"ab12","dimension":"output_tokens","limit":0,"remaining":0,"observed_at":"2026-03-01T11:00:01Z","reset":"2026-03-01T11:01:00Z","remaining_node":"b"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := clusterLearned([]flow.ClusterReport{tt.in})
			require.Len(t, got, 1)
			b, err := json.Marshal(got[0])
			require.NoError(t, err)
			require.JSONEq(t, tt.want, string(b))
		})
	}
	require.NotNil(t, clusterLearned(nil), "an empty list, not null")
}
