package jobs

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
	"github.com/sluicehq/sluice/upstream"
)

// worker runs one upstream's jobs: its loop (workerLoop) and the run of
// each job it starts (run.go). It does not claim first and wait under a
// lease: it learns from the store which priority classes have available
// jobs (Backlog), asks the upstream's engine for admission in those
// classes (Acquire: the same scheduler as live traffic, so weighted fair
// queueing holds), and only once admitted claims a job of the admitted
// class and makes its one call. A job is therefore running (leased) only
// while its call is admitted and in flight; waiting for quota, backoff or
// an open breaker happens in the store (queued, available_at).
type worker struct {
	s          *Service
	upstream   string
	dispatcher Dispatcher
	protocol   llm.Protocol
	jobCtx     context.Context // parent of every job's context; aborted by Stop
	// route is the upstream's routing to its provider's Batch API: the
	// worker claims the jobs of a routed class only once they are too
	// near their deadline to be routed (batch_router.go).
	route upstream.BatchRoute

	costs costMemory
}

// jobsClient is the client the admissions of jobs wait as in their class:
// inside a class, durable work shares the upstream round robin with each
// live client.
const jobsClient = "sluice-jobs"

// acquired is an Acquire that returned: its ticket (an admission), or why
// there is none.
type acquired struct {
	class  llm.Priority
	via    route
	ticket *dispatch.Ticket
	err    error
}

// admission is an admitted ticket and where it was asked.
type admission struct {
	ticket *dispatch.Ticket
	via    route
}

// claim claims up to limit available jobs of class; with deadlineBy set,
// only jobs whose deadline is at or before it.
func (w *worker) claim(ctx context.Context, class llm.Priority, limit int, deadlineBy time.Time) []*jobstore.Job {
	cfg := w.s.cfg
	if !w.s.replaySpool(ctx) {
		return nil
	}
	now := cfg.Clock.Now()
	p := jobstore.ClaimParams{
		Upstream: w.upstream,
		Priority: &class,
		Limit:    limit,
		Owner:    cfg.Owner,
		LeaseFor: cfg.LeaseFor,
		Now:      now,
	}
	if w.routes(class) {
		p.DeadlineBy = now.Add(w.route.MinTimeLeft)
	}
	if !deadlineBy.IsZero() && (p.DeadlineBy.IsZero() || deadlineBy.Before(p.DeadlineBy)) {
		p.DeadlineBy = deadlineBy
	}
	jobs, err := w.s.store.Claim(ctx, p)
	if err != nil && ctx.Err() == nil {
		cfg.Logger.Warn("claiming jobs", "upstream", w.upstream, "err", err)
	}
	return jobs
}

// handBack returns a leased job to the queue, available at once, without
// burning an attempt or adding to its history: its call never started.
func (w *worker) handBack(j *jobstore.Job) {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	if _, err := s.store.Fail(ctx, jobstore.FailParams{ID: j.ID, Token: j.Lease.Token, Kind: jobstore.FailReschedule,
		RetryAt: now, Now: now}); err != nil {
		s.cfg.Logger.Warn("handing a job back", "job", j.ID, "err", err)
	}
}

// routes reports whether the jobs of class are routed to the provider's
// Batch API.
func (w *worker) routes(class llm.Priority) bool {
	return w.route.Enabled() && slices.Contains(w.route.RoutedClasses(), class)
}

func sum(a [llm.NumPriorities]int) int {
	n := 0
	for _, v := range a {
		n += v
	}
	return n
}

// costMemoryLen is how many recent jobs' costs a class remembers.
const costMemoryLen = 8

// costMemory remembers the estimated cost of the last few jobs of each
// class: an Acquire, made before its job is known, reserves the largest of
// them. Over-estimating only delays admission briefly (the surplus is
// refunded as soon as the call knows the real cost); under-estimating
// hands the job back unsent when the extra does not fit.
type costMemory struct {
	mu   sync.Mutex
	ring [llm.NumPriorities][costMemoryLen]provider.Cost
	next [llm.NumPriorities]int
}

func (m *costMemory) remember(c llm.Priority, cost provider.Cost) {
	if !c.Valid() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ring[c][m.next[c]%costMemoryLen] = cost
	m.next[c]++
}

func (m *costMemory) forget(c llm.Priority) {
	if !c.Valid() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ring[c] = [costMemoryLen]provider.Cost{}
}

func (m *costMemory) estimate(c llm.Priority) provider.Cost {
	if !c.Valid() {
		return provider.Cost{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out provider.Cost
	for _, k := range m.ring[c] {
		out.InputTokens = max(out.InputTokens, k.InputTokens)
		out.OutputTokens = max(out.OutputTokens, k.OutputTokens)
	}
	return out
}
