package opsview

import (
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// ClusterLearned is one dimension of one provider key's latest report as
// the cluster shares it: the limit learned from the headers and the node
// that reported it, and the latest remaining with when it was observed
// and by whom.
type ClusterLearned struct {
	// Key is the provider key's fingerprint (a pool has several).
	Key       string `json:"key"`
	Dimension string `json:"dimension"`
	// Limit is the per-minute limit the provider reported (0: none yet),
	// LearnedAt when and LimitNode by which node.
	Limit     float64    `json:"limit"`
	LearnedAt *time.Time `json:"learned_at,omitempty"`
	LimitNode string     `json:"limit_node,omitempty"`
	// Remaining is the latest remaining reported (absent: none),
	// ObservedAt when the answer came, Reset when the provider said its
	// bucket is full again, RemainingNode which node received it.
	Remaining     *float64   `json:"remaining,omitempty"`
	ObservedAt    *time.Time `json:"observed_at,omitempty"`
	Reset         *time.Time `json:"reset,omitempty"`
	RemainingNode string     `json:"remaining_node,omitempty"`
}

func clusterLearned(ls []flow.ClusterReport) []ClusterLearned {
	out := make([]ClusterLearned, 0, len(ls))
	utc := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	for _, l := range ls {
		c := ClusterLearned{Key: l.Account, Dimension: l.Dim.String()}
		if l.HasLimit() {
			c.Limit, c.LearnedAt, c.LimitNode = l.Limit, utc(l.LimitAt), l.LimitNode
		}
		if l.HasRemaining() {
			rem := l.Remaining
			c.Remaining, c.ObservedAt, c.Reset, c.RemainingNode = &rem, utc(l.At), utc(l.Reset), l.RemainingNode
		}
		out = append(out, c)
	}
	return out
}
