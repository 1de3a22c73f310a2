package jobs

import (
	"cmp"
	"context"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/jobstore"
)

// The batch router's side of the admission layer (docs/budgets.md, "Jobs
// routed to a provider's Batch API"): a routed job's line is admitted
// before its provider batch is sent, as a synchronous call is before it is
// sent (BatchPricer.ReserveBatchLine: its client's access, service tiers
// and budget, which holds the line's worst case at the batch price), and
// its hold is settled when the line is written back: charged what the
// provider billed, or given back. The holds live in the router's memory,
// by group; a router that takes a group over (another node's, or its own
// process's before a restart) holds its open lines again, whatever their
// budget says, since they are sent.

// lineHold is a routed line's budget hold.
type lineHold struct {
	hold admit.BatchHold
}

// lineClient is who a routed job's line is charged to (its client, or the
// jobs' own name for a job without one).
func lineClient(j *jobstore.Job) string { return cmp.Or(j.Client, jobsClient) }

// admitLines admits the lines of g, a group just made of jobs, and
// returns the jobs admitted, whose holds it keeps. A refused job is
// written back at once, never sent: requeued for when its budget resets
// or the reservations in flight settle (its history says why, no attempt
// burnt), or killed by a refusal that never lifts (a total budget spent,
// a line its budget can never hold, a model it may not use), as the
// worker does with a refused call. ok is false when the write failed
// (the group then goes on at the next turn with every line).
func (r *batchRouter) admitLines(ctx context.Context, g *jobstore.Group, jobs []*jobstore.Job) (admitted []*jobstore.Job, ok bool) {
	cfg := r.s.cfg
	now := cfg.Clock.Now()
	t := admit.Target{Upstream: r.upstream, Protocol: r.protocol}
	r.dropHolds(g.ID) // admitted before, and not sent: admitted afresh
	holds := map[int64]lineHold{}
	var refused []jobstore.GroupLine
	for _, j := range jobs {
		req, rerr := jobRequest(r.protocol, j, now)
		if rerr != nil {
			// A body the front door no longer takes: the provider would
			// refuse it too; it is sent, and its line answers for it.
			admitted = append(admitted, j)
			continue
		}
		req.Client = lineClient(j)
		h, err := cfg.BatchPricer.ReserveBatchLine(t, req)
		if err != nil {
			v := notAdmitted(err, now)
			refused = append(refused, jobstore.GroupLine{JobID: j.ID, Fail: v.fail})
			continue
		}
		holds[j.ID] = lineHold{hold: h}
		admitted = append(admitted, j)
	}
	r.holds[g.ID] = holds
	if len(refused) == 0 {
		return admitted, true
	}
	if !r.writeLines(ctx, g, refused, nil, map[BatchLineOutcome]int{LineHeld: len(refused)}, now) {
		r.dropHolds(g.ID)
		return nil, false
	}
	return admitted, true
}

// reconcileHolds makes the holds match the groups this router leased
// this turn: a group it no longer holds (another router took it over)
// gives its holds back; a group it holds without holds (taken over, or
// held before this process started) whose submit began (its lines may be
// at the provider) holds its open lines. A group never sent is admitted
// before its submit (advance).
func (r *batchRouter) reconcileHolds(ctx context.Context, groups []*jobstore.Group) {
	leased := make(map[string]bool, len(groups))
	for _, g := range groups {
		leased[g.ID] = true
	}
	for id := range r.holds {
		if !leased[id] {
			r.dropHolds(id)
		}
	}
	cfg := r.s.cfg
	for _, g := range groups {
		if _, ok := r.holds[g.ID]; ok || (g.State == jobstore.GroupPending && g.SubmitStartedAt.IsZero()) {
			continue
		}
		jobs, err := r.openJobs(ctx, g)
		if err != nil {
			cfg.Logger.Warn("reading a provider batch group's jobs", "upstream", r.upstream, "group", g.ID, "err", err)
			continue
		}
		now := cfg.Clock.Now()
		holds := make(map[int64]lineHold, len(jobs))
		for _, j := range jobs {
			if req, rerr := jobRequest(r.protocol, j, now); rerr == nil {
				req.Client = lineClient(j)
				holds[j.ID] = lineHold{hold: cfg.BatchPricer.HoldBatchLine(r.protocol, req)}
			}
		}
		r.holds[g.ID] = holds
	}
}

// settleHold ends the hold of job id's line in group: charged c when the
// line was billed and this router wrote it back, else given back.
func (r *batchRouter) settleHold(group string, id int64, c lineCost, billed bool) {
	h, held := r.holds[group][id]
	if held {
		delete(r.holds[group], id)
	}
	switch {
	case billed:
		r.s.cfg.BatchPricer.BatchCharged(c.client, r.upstream, c.cost, h.hold)
	case held:
		r.s.cfg.BatchPricer.ReleaseBatchLine(h.hold)
	}
}

// dropHolds gives back every hold of group and forgets it.
func (r *batchRouter) dropHolds(group string) {
	for _, h := range r.holds[group] {
		r.s.cfg.BatchPricer.ReleaseBatchLine(h.hold)
	}
	delete(r.holds, group)
}
