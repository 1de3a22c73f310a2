package jobs

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// batchRouter routes the jobs of an upstream's routed classes to its
// provider's Batch API (upstream.BatchRoute; docs/jobs-api.md, "Routing to
// the provider's Batch API"). One runs per routed upstream, a step of the
// Service's Start and Stop. Each turn (every PollInterval, on the clock):
//
//	lease   the open groups this node holds are renewed, and those whose
//	        router died are taken over (jobstore.LeaseGroups: one router
//	        per group, fenced by its token)
//	advance each group: a pending one is submitted (or, if a submit was
//	        begun and its answer lost, found at the provider by its tag);
//	        a running one is polled, canceled at the provider once its
//	        earliest deadline is within DeadlineMargin, and written back
//	        once ended
//	form    new groups of the queued jobs that may be routed, while the
//	        queue makes them (jobstore.CreateGroup), each submitted at once
//
// Every write is fenced by the group's token and each line is written back
// once with its spend (jobstore.FinishGroupLines), so polls, retries,
// restarts and several nodes never charge a line twice. A line canceled or
// expired at the provider costs nothing; an expired one costs its job an
// attempt (as an errored one does). Its job goes back to the queue, where the synchronous worker takes it once it is too near its
// deadline to route (ClaimParams.DeadlineBy), or the router groups it
// again.
type batchRouter struct {
	s        *Service
	upstream string
	protocol llm.Protocol
	route    upstream.BatchRoute
	classes  []llm.Priority
	// paths are the endpoints a group is formed for, one at a time (a
	// provider batch carries one).
	paths []string
	api   BatchAPI
	// maxJobs is the largest group sent now: route.MaxRequests, halved
	// by each queue-full answer (the provider's queued-request and
	// enqueued-token limits, learned from its errors), grown back by a
	// quarter with each accepted batch. Only the router's goroutine touches it.
	maxJobs int
	// holdUntil is when the router may form groups again after a
	// queue-full answer that carried the provider's Retry-After (zero:
	// now). Only the router's goroutine touches it.
	holdUntil time.Time
	// holds are the budget holds of the lines in flight in the groups this
	// router holds, by group and job (batch_admission.go). Only the
	// router's goroutine touches them.
	holds map[string]map[int64]lineHold
}

// batchLineChunk bounds the lines written back in one transaction.
const batchLineChunk = 500

func newBatchRouter(s *Service, name string, route upstream.BatchRoute, api BatchAPI) *batchRouter {
	route = route.WithDefaults()
	return &batchRouter{s: s, upstream: name, protocol: s.cfg.Protocols[name], route: route,
		classes: route.RoutedClasses(), paths: provider.ScheduledPaths(s.cfg.Protocols[name]), api: api, maxJobs: route.MaxRequests,
		holds: map[string]map[int64]lineHold{}}
}

// loop turns the router until ctx ends.
func (r *batchRouter) loop(ctx context.Context) {
	t := r.s.cfg.Clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		r.turn(ctx)
		t.Reset(r.route.PollInterval)
	}
}

// turn is one pass: lease, advance, form.
func (r *batchRouter) turn(ctx context.Context) {
	cfg := r.s.cfg
	groups, err := r.s.store.LeaseGroups(ctx, jobstore.LeaseGroupsParams{Upstream: r.upstream, Owner: cfg.Owner,
		LeaseFor: r.leaseFor(), Now: cfg.Clock.Now()})
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("leasing provider batch groups", "upstream", r.upstream, "err", err)
		}
		return
	}
	r.reconcileHolds(ctx, groups)
	for _, g := range groups {
		if ctx.Err() != nil {
			return
		}
		r.advance(ctx, g)
	}
	// No new batch while the provider's Retry-After runs (refused sets it).
	held := func() bool { return cfg.Clock.Now().Before(r.holdUntil) }
	for _, path := range r.paths {
		for ctx.Err() == nil && !held() && r.form(ctx, path) {
		}
	}
}

// leaseFor is how long a group's lease lasts: three polls.
func (r *batchRouter) leaseFor() time.Duration { return 3 * r.route.PollInterval }

// form makes one group of the jobs to path that may be routed now and
// submits it; it reports whether it made one.
func (r *batchRouter) form(ctx context.Context, path string) bool {
	cfg := r.s.cfg
	now := cfg.Clock.Now()
	lineBytes, batchBytes := batchSize(r.protocol, path)
	res, err := r.s.store.CreateGroup(ctx, jobstore.CreateGroupParams{Upstream: r.upstream, Classes: r.classes, Path: path,
		DeadlineAfter: now.Add(r.route.MinTimeLeft), MinJobs: min(r.route.MinGroup, r.maxJobs), WaitedSince: now.Add(-r.route.MaxWait),
		MaxJobs: r.maxJobs, MaxBytes: max(1, r.route.MaxBytes-batchBytes), LineBytes: lineBytes,
		LeaseUntil: now.Add(providerBatchWindow + r.route.DeadlineMargin), Margin: r.route.DeadlineMargin,
		Owner: cfg.Owner, LeaseFor: r.leaseFor(), Now: now})
	if err != nil {
		if ctx.Err() == nil {
			cfg.Logger.Warn("forming a provider batch group", "upstream", r.upstream, "err", err)
		}
		return false
	}
	if res.Group == nil {
		return false
	}
	cfg.Observer.BatchGroup(r.upstream, BatchGroupFormed, res.Group.Jobs)
	jobs, ok := r.admitLines(ctx, res.Group, res.Jobs)
	if ok && len(jobs) > 0 {
		r.submit(ctx, res.Group, jobs)
	}
	return true
}

// providerBatchWindow is how long the providers take at most to end a
// batch (24 hours: processed or expired).
const providerBatchWindow = 24 * time.Hour

// advance moves one leased group on.
func (r *batchRouter) advance(ctx context.Context, g *jobstore.Group) {
	cfg := r.s.cfg
	switch g.State {
	case jobstore.GroupPending:
		jobs, err := r.openJobs(ctx, g)
		if err != nil {
			cfg.Logger.Warn("reading a provider batch group's jobs", "upstream", r.upstream, "group", g.ID, "err", err)
			return
		}
		if !g.SubmitStartedAt.IsZero() {
			// A submit was begun and its answer never recorded (a crash, a
			// lost answer): find it rather than send it twice.
			pb, found, err := r.api.Find(ctx, BatchQuery{Tag: g.ID, Since: g.SubmitStartedAt, Lines: batchLines(jobs)})
			if err != nil {
				cfg.Logger.Warn("looking for a provider batch after an unrecorded submit", "upstream", r.upstream, "group", g.ID, "err", err)
				return
			}
			if found {
				r.submitted(ctx, g, pb)
				return
			}
		} else {
			// Never sent: its lines are admitted as a new group's are.
			var ok bool
			if jobs, ok = r.admitLines(ctx, g, jobs); !ok || len(jobs) == 0 {
				return
			}
		}
		r.submit(ctx, g, jobs)
	case jobstore.GroupSubmitted, jobstore.GroupCanceling:
		pb, err := r.api.Get(ctx, g.ProviderID)
		switch {
		case errors.Is(err, ErrBatchNotFound):
			// Gone at the provider: nothing of it can be read; its jobs
			// go back to the queue.
			cfg.Logger.Warn("a provider batch is gone: its jobs go back to the queue", "upstream", r.upstream, "group", g.ID, "batch", g.ProviderID)
			r.writeBack(ctx, g, nil)
			return
		case err != nil:
			cfg.Logger.Warn("polling a provider batch", "upstream", r.upstream, "group", g.ID, "batch", g.ProviderID, "err", err)
			return
		}
		if pb.Ended {
			results, err := r.api.Results(ctx, g.ProviderID)
			if r.refused(ctx, g, err) {
				return
			}
			if err != nil {
				cfg.Logger.Warn("reading a provider batch's results", "upstream", r.upstream, "group", g.ID, "batch", g.ProviderID, "err", err)
				return
			}
			r.writeBack(ctx, g, results)
			return
		}
		if g.State == jobstore.GroupSubmitted && !g.PullBackAt.IsZero() && !cfg.Clock.Now().Before(g.PullBackAt) {
			r.pullBack(ctx, g)
		}
	case jobstore.GroupEnded:
		// Written back: nothing is left to move (the lease pass does not
		// hand out ended groups).
	}
}

// openJobs reads the jobs of g whose lines are not written back.
func (r *batchRouter) openJobs(ctx context.Context, g *jobstore.Group) ([]*jobstore.Job, error) {
	members, err := r.s.store.GroupMembers(ctx, g.ID)
	if err != nil {
		return nil, err
	}
	var jobs []*jobstore.Job
	for _, m := range members {
		if m.Done {
			continue
		}
		j, err := r.s.store.Get(ctx, m.JobID)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// submit sends g's jobs as one provider batch: the submit's start is
// recorded first, the provider's id after.
func (r *batchRouter) submit(ctx context.Context, g *jobstore.Group, jobs []*jobstore.Job) {
	cfg := r.s.cfg
	if _, err := r.s.store.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: g.ID, Token: g.Lease.Token, SubmitStarted: true,
		Now: cfg.Clock.Now()}); err != nil {
		cfg.Logger.Warn("recording a provider batch submit", "upstream", r.upstream, "group", g.ID, "err", err)
		return
	}
	pb, err := r.api.Create(ctx, g.ID, batchLines(jobs))
	if r.refused(ctx, g, err) {
		return
	}
	if err != nil {
		// May or may not have reached the provider: the next turn looks
		// for it by its tag before sending it again.
		cfg.Logger.Warn("submitting a provider batch", "upstream", r.upstream, "group", g.ID, "err", err)
		return
	}
	r.maxJobs = min(r.route.MaxRequests, r.maxJobs+r.maxJobs/4+1)
	r.submitted(ctx, g, pb)
}

// refused handles the provider's refusal of g's batch as a whole, at its
// create or when it failed before running (OpenAI validates a batch after
// accepting it): nothing of it ran. It reports false when err is no
// refusal.
func (r *batchRouter) refused(ctx context.Context, g *jobstore.Group, err error) bool {
	cfg := r.s.cfg
	var refusal *BatchRefusalError
	switch {
	case errors.As(err, &refusal) && g.Jobs == 1:
		// The provider refuses this one request: the job ends with its
		// answer, as a line it refused would.
		members, merr := r.s.store.GroupMembers(ctx, g.ID)
		if merr != nil || len(members) != 1 {
			cfg.Logger.Warn("reading a provider batch group's jobs", "upstream", r.upstream, "group", g.ID, "err", merr)
			return true
		}
		cfg.Observer.BatchGroup(r.upstream, BatchGroupRefused, 1)
		r.writeBack(ctx, g, []BatchLineResult{{CustomID: lineID(members[0].JobID), Outcome: LineErrored,
			Status: refusal.Status, Body: refusal.Body}})
	case errors.Is(err, ErrBatchRefused), errors.Is(err, ErrBatchQueueFull):
		// Refused whole (for a line's content, or the provider's queue
		// limits): smaller groups from now on (down to a refused line
		// alone in its group, above), and these jobs back to the queue to
		// be grouped again.
		r.maxJobs = max(1, min(r.maxJobs, g.Jobs)/2)
		if wait, ok := retryAfterOf(err); ok && errors.Is(err, ErrBatchQueueFull) {
			r.holdUntil = cfg.Clock.Now().Add(wait) // and no batch before the provider's Retry-After
		}
		cfg.Logger.Warn("the provider refused a batch: smaller batches from now on", "upstream", r.upstream,
			"group", g.ID, "max_requests", r.maxJobs, "err", err)
		cfg.Observer.BatchGroup(r.upstream, BatchGroupRefused, g.Jobs)
		r.writeBack(ctx, g, nil)
	default:
		return false
	}
	return true
}

// batchLines are jobs as the lines of a provider batch.
func batchLines(jobs []*jobstore.Job) []BatchLine {
	lines := make([]BatchLine, len(jobs))
	for i, j := range jobs {
		lines[i] = BatchLine{CustomID: lineID(j.ID), Path: j.Path, Body: j.Body}
	}
	return lines
}

// submitted records the provider's id of g's batch.
func (r *batchRouter) submitted(ctx context.Context, g *jobstore.Group, pb ProviderBatch) {
	cfg := r.s.cfg
	if _, err := r.s.store.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: g.ID, Token: g.Lease.Token, State: jobstore.GroupSubmitted,
		ProviderID: pb.ID, Now: cfg.Clock.Now()}); err != nil {
		cfg.Logger.Warn("recording a provider batch id", "upstream", r.upstream, "group", g.ID, "batch", pb.ID, "err", err)
		return
	}
	cfg.Observer.BatchGroup(r.upstream, BatchGroupSubmitted, g.Jobs)
}

// pullBack cancels g at the provider: its earliest deadline is too near
// to wait for it. The lines done before the cancel are kept when it ends;
// the others go back to the queue for the synchronous path.
func (r *batchRouter) pullBack(ctx context.Context, g *jobstore.Group) {
	cfg := r.s.cfg
	if err := r.api.Cancel(ctx, g.ProviderID); err != nil && !errors.Is(err, ErrBatchNotFound) {
		cfg.Logger.Warn("canceling a provider batch for a deadline", "upstream", r.upstream, "group", g.ID, "err", err)
		return
	}
	if _, err := r.s.store.UpdateGroup(ctx, jobstore.UpdateGroupParams{ID: g.ID, Token: g.Lease.Token, State: jobstore.GroupCanceling,
		Now: cfg.Clock.Now()}); err != nil {
		cfg.Logger.Warn("recording a provider batch cancel", "upstream", r.upstream, "group", g.ID, "err", err)
		return
	}
	cfg.Observer.BatchGroup(r.upstream, BatchGroupPulledBack, g.Jobs)
}

// writeBack writes every open line of g back from results (a line
// without a result goes back to the queue), in chunks, then tells the
// budgets, the metrics, the long polls and the webhook sender.
func (r *batchRouter) writeBack(ctx context.Context, g *jobstore.Group, results []BatchLineResult) {
	cfg := r.s.cfg
	members, err := r.s.store.GroupMembers(ctx, g.ID)
	if err != nil {
		cfg.Logger.Warn("reading a provider batch group's jobs", "upstream", r.upstream, "group", g.ID, "err", err)
		return
	}
	byID := make(map[string]*BatchLineResult, len(results))
	for i := range results {
		byID[results[i].CustomID] = &results[i]
	}
	var open []jobstore.GroupMember
	for _, m := range members {
		if !m.Done {
			open = append(open, m)
		}
	}
	for chunk := range slices.Chunk(open, batchLineChunk) {
		if !r.writeChunk(ctx, g, chunk, byID) {
			return
		}
	}
}

// writeChunk writes the lines of members back in one transaction; it
// reports false when the router must stop (lost lease, store error).
func (r *batchRouter) writeChunk(ctx context.Context, g *jobstore.Group, members []jobstore.GroupMember, byID map[string]*BatchLineResult) bool {
	now := r.s.cfg.Clock.Now()
	lines := make([]jobstore.GroupLine, 0, len(members))
	costs := map[int64]lineCost{}
	outcomes := map[BatchLineOutcome]int{}
	for _, m := range members {
		res := byID[lineID(m.JobID)]
		line, cost, outcome, err := r.line(ctx, m.JobID, res, now)
		if err != nil {
			r.s.cfg.Logger.Warn("reading a routed job", "upstream", r.upstream, "job", m.JobID, "err", err)
			return false
		}
		lines = append(lines, line)
		outcomes[outcome]++
		if cost != nil {
			costs[m.JobID] = *cost
		}
	}
	return r.writeLines(ctx, g, lines, costs, outcomes, now)
}

// writeLines writes lines of g back in one transaction, then settles
// their budget holds (each written line's cost in costs charged, the
// others' holds given back), and tells the metrics, the long polls and
// the webhook sender. It reports false when the router must stop.
func (r *batchRouter) writeLines(ctx context.Context, g *jobstore.Group, lines []jobstore.GroupLine, costs map[int64]lineCost,
	outcomes map[BatchLineOutcome]int, now time.Time) bool {
	cfg := r.s.cfg
	fr, err := r.s.store.FinishGroupLines(ctx, jobstore.FinishGroupLinesParams{GroupID: g.ID, Token: g.Lease.Token, Lines: lines, Now: now})
	if err != nil {
		cfg.Logger.Warn("writing a provider batch's results back", "upstream", r.upstream, "group", g.ID, "err", err)
		return false
	}
	written := make(map[int64]bool, len(fr.Written))
	for _, id := range fr.Written {
		written[id] = true
	}
	for _, l := range lines {
		c, billed := costs[l.JobID]
		r.settleHold(g.ID, l.JobID, c, billed && written[l.JobID])
		if billed && written[l.JobID] {
			cfg.Observer.BatchSpend(r.upstream, c.cost.Batch.Dollars(), c.cost.Standard.Dollars())
		}
	}
	for o, n := range outcomes {
		cfg.Observer.BatchLines(r.upstream, o, n)
	}
	for _, st := range []jobstore.State{jobstore.StateSucceeded, jobstore.StateDead} {
		if n := len(fr.Finished[st]); n > 0 {
			cfg.Observer.Finished(r.upstream, st, n)
		}
	}
	if len(fr.Finished[jobstore.StateSucceeded])+len(fr.Finished[jobstore.StateDead]) > 0 {
		r.s.announce()
		r.s.hooks.kick()
	}
	if fr.Ended {
		cfg.Observer.BatchGroup(r.upstream, BatchGroupEnded, g.Jobs)
		r.dropHolds(g.ID)
	}
	return true
}

// lineCost is what a line cost, for its client.
type lineCost struct {
	client string
	cost   admit.BatchLineCost
}

// line is job id's write-back for its result res (nil: none, back to the
// queue), with its cost when it was billed, and its outcome.
func (r *batchRouter) line(ctx context.Context, id int64, res *BatchLineResult, now time.Time) (jobstore.GroupLine, *lineCost, BatchLineOutcome, error) {
	if res == nil {
		return jobstore.GroupLine{JobID: id, Release: true}, nil, LineCanceled, nil
	}
	switch res.Outcome {
	case LineSucceeded:
		j, err := r.s.store.Get(ctx, id)
		if err != nil {
			return jobstore.GroupLine{}, nil, "", err
		}
		model := ""
		if req, rerr := jobRequest(r.protocol, j, now); rerr == nil {
			model = req.Cost.Model
		}
		cost := r.s.cfg.BatchPricer.PriceBatchLine(r.protocol, model, res.Usage)
		h := http.Header{"Content-Type": {"application/json"}, servedByHeader: {r.upstream}, BatchHeader: {"provider"}}
		if cost.Batch > 0 {
			h[CostHeader] = []string{strconv.FormatFloat(cost.Batch.Dollars(), 'f', -1, 64)}
		}
		return jobstore.GroupLine{JobID: id, Complete: &jobstore.Result{Status: cmp.Or(res.Status, http.StatusOK), Header: h,
				Body: res.Body, Usage: res.Usage},
				Spend: &jobstore.SpendEntry{Client: cmp.Or(j.Client, jobsClient), Upstream: r.upstream, Model: cost.Entry, Day: now,
					Nanos: int64(cost.Batch), Requests: 1}},
			&lineCost{client: cmp.Or(j.Client, jobsClient), cost: cost}, LineSucceeded, nil
	case LineErrored:
		if res.Status >= 400 && res.Status < 500 && res.Status != http.StatusTooManyRequests {
			return jobstore.GroupLine{JobID: id, Dead: &jobstore.AttemptError{Status: res.Status, Kind: llm.ClientError.String(),
				Message: "the provider's Batch API refused the request", Upstream: r.upstream},
				DeadResult: &jobstore.Result{Status: res.Status, Header: http.Header{"Content-Type": {"application/json"}}, Body: res.Body}}, nil, LineErrored, nil
		}
		line, err := r.retryLine(ctx, id, res, now)
		return line, nil, LineErrored, err
	case LineExpired:
		// Never billed, but the provider did not process it in its
		// window: an attempt, as an errored line, so that a job the
		// provider keeps expiring ends at its max_attempts.
		line, err := r.expiredLine(ctx, id, now)
		return line, nil, LineExpired, err
	default: // canceled (by the router's pull-back or the job's client): never billed
		return jobstore.GroupLine{JobID: id, Release: true}, nil, res.Outcome, nil
	}
}

// expiredLine is the write-back of job id's line that the provider let
// expire unprocessed: an attempt with a 408-like error of its own (no
// answer from the provider to keep), requeued after the job's backoff.
func (r *batchRouter) expiredLine(ctx context.Context, id int64, now time.Time) (jobstore.GroupLine, error) {
	j, err := r.s.store.Get(ctx, id)
	if err != nil {
		return jobstore.GroupLine{}, err
	}
	return jobstore.GroupLine{JobID: id, Fail: &jobstore.FailParams{Kind: jobstore.FailRetry,
		Error: jobstore.AttemptError{Kind: llm.Transient.String(), Upstream: r.upstream,
			Message: "the provider's Batch API let the request expire unprocessed"},
		RetryAt: now.Add(r.s.backoff.Delay(j.Attempts, r.s.uniform()))}}, nil
}

// retryLine is the write-back of job id's line that the provider answered
// with an error worth retrying (a 5xx, a 429): an attempt, as a call the
// synchronous path made and the provider failed, so a job without a
// deadline ends at its max_attempts rather than go round provider batches
// for ever; requeued after the job's retry backoff (retry:), its last
// attempt kills it with the provider's answer.
func (r *batchRouter) retryLine(ctx context.Context, id int64, res *BatchLineResult, now time.Time) (jobstore.GroupLine, error) {
	j, err := r.s.store.Get(ctx, id)
	if err != nil {
		return jobstore.GroupLine{}, err
	}
	kind, status := llm.Transient, cmp.Or(res.Status, http.StatusInternalServerError)
	if status == http.StatusTooManyRequests {
		kind = llm.Rate
	}
	return jobstore.GroupLine{JobID: id, Fail: &jobstore.FailParams{Kind: jobstore.FailRetry,
		Error: jobstore.AttemptError{Status: status, Kind: kind.String(), Upstream: r.upstream,
			Message: "the provider's Batch API answered the request with status " + strconv.Itoa(status)},
		RetryAt: now.Add(r.s.backoff.Delay(j.Attempts, r.s.uniform())),
		Result:  &jobstore.Result{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: res.Body}}}, nil
}

// BatchHeader is set on the result of a job answered through the
// provider's Batch API (its value: "provider").
const BatchHeader = "X-Sluice-Batch-Route"

// lineID is a job's custom_id in a provider batch.
func lineID(id int64) string { return "job_" + strconv.FormatInt(id, 10) }
