package upstream_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/upstream"
)

// TestBatchRouteValidate: each bad batch: field is named in its error.
func TestBatchRouteValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		batch upstream.BatchRoute
		want  string
	}{
		{"none", upstream.BatchRoute{}, ""},
		{"low", upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MaxWait: 30 * time.Minute}, ""},
		{"classes without route", upstream.BatchRoute{Classes: []string{"low"}}, "batch.route"},
		{"unknown route", upstream.BatchRoute{Route: "flex", Classes: []string{"low"}}, "batch.route"},
		{"no classes", upstream.BatchRoute{Route: "provider"}, "batch.classes"},
		{"bad class", upstream.BatchRoute{Route: "provider", Classes: []string{"lowest"}}, "batch.classes[0]"},
		{"negative wait", upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MaxWait: -time.Minute}, "batch.max_wait"},
		{"time left too short", upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinTimeLeft: 20 * time.Minute}, "batch.min_time_left"},
		{"group over max", upstream.BatchRoute{Route: "provider", Classes: []string{"low"}, MinGroup: 10, MaxRequests: 5}, "batch.min_group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := upstream.Config{Name: "a", Protocol: upstream.Anthropic, APIKey: "k", Batch: tc.batch}.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
