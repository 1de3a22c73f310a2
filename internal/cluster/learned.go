package cluster

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
)

// A node shares the provider's reports (flow.ClusterReport) through the
// store: per key, account and dimension, the store keeps the limit with
// the latest LimitAt and, separately, the remaining with the latest At; a
// report older than the one kept does not overwrite it, and the record
// outlives the lease of the node that reported it. The instants are the
// reporting nodes' clocks: nodes whose clocks disagree by d order two
// reports less than d apart arbitrarily (both are recent).

// field names l's record within its key.
func field(l flow.ClusterReport) string { return l.Account + "/" + strconv.Itoa(int(l.Dim)) }

// Learner is a Member that shares what the provider's headers teach it:
// the node publishes Heard's reports and applies every sync's Grant
// through Adopt (flow.ClusterShare.Adopt: a learned limit at once, a remaining
// only to lower the node's share).
type Learner interface {
	// Heard returns the member's own latest reports (LimitNode and
	// RemainingNode unset).
	Heard() []flow.ClusterReport
	// Adopt applies the cluster's latest reports.
	Adopt(ls []flow.ClusterReport)
}

// validateLearned checks a Report's learned records.
func validateLearned(ls []flow.ClusterReport) error {
	for _, l := range ls {
		switch {
		case l.Account == "" || strings.Contains(l.Account, "/"):
			return errors.Join(ErrBadReport, errors.New("a learned record needs an account without '/'"))
		case l.Dim < 0 || l.Dim >= flow.NumDims:
			return errors.Join(ErrBadReport, fmt.Errorf("learned dimension %d out of range", int(l.Dim)))
		case math.IsNaN(l.Limit) || math.IsInf(l.Limit, 0) || math.IsNaN(l.Remaining) || math.IsInf(l.Remaining, 0):
			return errors.Join(ErrBadReport, errors.New("learned figures must be finite"))
		}
	}
	return nil
}

// mergeLearned is one record's step: in, reported by node, replaces the
// limit of cur when it was learned later, and the remaining when it was
// answered later. changed says the limit's value changed (a new limit
// or the provider's change of one): the other nodes hear of it at once
// (Listener). The Postgres upsert and the Redis script do the same.
func mergeLearned(cur, in flow.ClusterReport, node string) (next flow.ClusterReport, changed bool) {
	cur.Account, cur.Dim = in.Account, in.Dim
	if in.HasLimit() && in.LimitAt.After(cur.LimitAt) {
		changed = in.Limit != cur.Limit
		cur.Limit, cur.LimitAt, cur.LimitNode = in.Limit, in.LimitAt, node
	}
	if in.HasRemaining() && in.At.After(cur.At) {
		cur.Remaining, cur.Reset, cur.SentAt, cur.At, cur.RemainingNode = in.Remaining, in.Reset, in.SentAt, in.At, node
	}
	return cur, changed
}

// normalLearned is l as a Grant carries it: no remaining is Remaining −1.
func normalLearned(l flow.ClusterReport) flow.ClusterReport {
	if l.At.IsZero() {
		l.Remaining = -1
	}
	return l
}

// sortLearned orders records by account and dimension, for stable answers.
func sortLearned(ls []flow.ClusterReport) {
	slices.SortFunc(ls, func(a, b flow.ClusterReport) int {
		if c := strings.Compare(a.Account, b.Account); c != 0 {
			return c
		}
		return int(a.Dim) - int(b.Dim)
	})
}

// learnedStep merges r's records into the key's and returns them all, and
// whether a limit changed; m.mu held.
func (m *Memory) learnedStep(r Report) ([]flow.ClusterReport, bool) {
	if m.learned == nil {
		m.learned = map[string]map[string]flow.ClusterReport{}
	}
	recs := m.learned[r.Key]
	if recs == nil {
		recs = map[string]flow.ClusterReport{}
		m.learned[r.Key] = recs
	}
	changed := false
	for _, in := range r.Learned {
		next, ch := mergeLearned(recs[field(in)], in, r.Node)
		recs[field(in)], changed = next, changed || ch
	}
	out := make([]flow.ClusterReport, 0, len(recs))
	for _, l := range recs {
		out = append(out, normalLearned(l))
	}
	sortLearned(out)
	return out, changed
}

// toPublish returns the records of heard the node has not published yet
// (newer than the last it published for that record); n.mu held.
func (ms *memberState) toPublish(heard []flow.ClusterReport) []flow.ClusterReport {
	var out []flow.ClusterReport
	for _, h := range heard {
		sent := ms.sentLearned[field(h)]
		fresh := h
		if !h.LimitAt.After(sent.LimitAt) {
			fresh.Limit, fresh.LimitAt = 0, time.Time{}
		}
		if !h.At.After(sent.At) {
			fresh.Remaining, fresh.Reset, fresh.SentAt, fresh.At = -1, time.Time{}, time.Time{}, time.Time{}
		}
		if fresh.HasLimit() || fresh.HasRemaining() {
			out = append(out, fresh)
		}
	}
	return out
}

// newLimit reports whether heard has a limit the store has not had from
// this node (a first one, or the provider changed it): worth a sync at
// once rather than at the interval; n.mu held.
func (ms *memberState) newLimit(heard []flow.ClusterReport) bool {
	for _, h := range heard {
		if h.HasLimit() && ms.sentLearned[field(h)].Limit != h.Limit {
			return true
		}
	}
	return false
}

// markPublished records that ls reached the store; n.mu held.
func (ms *memberState) markPublished(ls []flow.ClusterReport) {
	if ms.sentLearned == nil {
		ms.sentLearned = map[string]flow.Heard{}
	}
	for _, l := range ls {
		s := ms.sentLearned[field(l)]
		if l.HasLimit() {
			s.Limit, s.LimitAt = l.Limit, l.LimitAt
		}
		if l.HasRemaining() {
			s.Remaining, s.At = l.Remaining, l.At
		}
		ms.sentLearned[field(l)] = s
	}
}

// heardOf returns m's own reports when it is a Learner.
func heardOf(m Member) []flow.ClusterReport {
	if lm, ok := m.(Learner); ok {
		return lm.Heard()
	}
	return nil
}

// adopt applies a grant's records to m when it is a Learner.
func adopt(m Member, ls []flow.ClusterReport) {
	if lm, ok := m.(Learner); ok && len(ls) > 0 {
		lm.Adopt(ls)
	}
}

// newLimit reports whether a member has learned a limit the cluster has
// not heard of from this node: it is published at once (and the store
// announces it to the other nodes), since until then they may be
// sending without it.
func (n *Node) newLimit(ms *memberState) bool {
	heard := heardOf(ms.m)
	n.mu.Lock()
	defer n.mu.Unlock()
	return ms.newLimit(heard)
}
