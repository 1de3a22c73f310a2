package jobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// worker is one upstream's loop. It does not claim first and wait under a
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

	costs costMemory
}

// jobsClient is the client the admissions of jobs wait as in their class:
// inside a class, durable work shares the upstream round robin with each
// live client.
const jobsClient = "sluice-jobs"

// grant is an Acquire that returned.
type grant struct {
	class  llm.Priority
	via    route
	ticket *dispatch.Ticket
	err    error
}

// admission is a granted ticket and where it was asked.
type admission struct {
	ticket *dispatch.Ticket
	via    route
}

// loop keeps up to MaxInFlightPerUpstream admissions outstanding (Acquire
// calls waiting plus calls in flight), spread round robin over the classes
// with a backlog and never more per class than its backlog. When a ticket
// is granted it collects the other tickets already granted, adds the ones
// the engine grants at once (TryAcquire), and claims that many jobs of the
// class in one statement; tickets left without a job are given back. While
// it has nothing to wait for it offers its free slots through a
// jobstore.Handoff, so jobs submitted meanwhile start without a claim.
func (w *worker) loop(ctx context.Context) {
	cfg := w.s.cfg
	limit := cfg.MaxInFlightPerUpstream
	done := make(chan struct{}, limit)
	grants := make(chan grant, limit)
	notify := w.s.store.Notify(ctx, w.upstream)
	timer := cfg.Clock.NewTimer(cfg.PollInterval)
	defer timer.Stop()

	acqCtx, stopAcquiring := context.WithCancel(ctx)
	var acquiring sync.WaitGroup
	var pending [llm.NumPriorities]int // Acquire calls outstanding
	var backlog [llm.NumPriorities]int // available jobs known, less those claimed since
	running := 0
	defer func() {
		stopAcquiring()
		acquiring.Wait()
		close(grants)
		for g := range grants {
			if g.ticket != nil {
				g.ticket.Release()
			}
		}
	}()

	start := func(j *jobstore.Job, a admission) {
		running++
		w.s.jobs.Add(1)
		go func() {
			defer w.s.jobs.Done()
			w.run(j, a)
			done <- struct{}{}
		}()
	}
	acquire := func(c llm.Priority) {
		pending[c]++
		acquiring.Add(1)
		via := w.routeFor(c)
		go func() {
			defer acquiring.Done()
			t, err := via.dispatcher.Acquire(acqCtx, dispatch.AcquireParams{Priority: c, Client: jobsClient, Cost: w.costs.estimate(c)})
			grants <- grant{class: c, via: via, ticket: t, err: err}
		}()
	}

	h, err := w.s.store.Handoff(jobstore.HandoffParams{Upstream: w.upstream, Owner: cfg.Owner,
		LeaseFor: cfg.LeaseFor, Capacity: limit})
	if err != nil {
		cfg.Logger.Warn("registering job handoff", "upstream", w.upstream, "err", err)
	}
	var handed <-chan *jobstore.Job
	if h != nil {
		handed = h.Jobs()
		defer func() {
			// Jobs leased to this worker at shutdown go back to the queue.
			for _, j := range h.Close() {
				w.handBack(j)
			}
		}()
	}
	pendingHandoffs := func() int {
		if h == nil {
			return 0
		}
		return h.Pending()
	}
	takeHanded := func(j *jobstore.Job) {
		// A handed-off job runs only if admitted at once; it never waits
		// under its lease.
		via := w.routeFor(j.Priority)
		if t, ok := via.dispatcher.TryAcquire(dispatch.AcquireParams{Priority: j.Priority, Client: j.Client,
			Cost: w.costs.estimate(j.Priority)}); ok {
			start(j, admission{ticket: t, via: via})
			return
		}
		w.handBack(j)
	}

	refresh := true
	refused := false // an Acquire failed (the engine stopped): none until the next poll
	for {
		if refresh {
			refresh = false
			// Spooled results go back to the store before anything is
			// claimed: a job whose answer is spooled is not called again.
			if !w.s.replaySpool(ctx) {
				backlog = [llm.NumPriorities]int{}
			} else if b, err := w.s.store.Backlog(ctx, w.upstream, cfg.Clock.Now(), limit); err != nil {
				if ctx.Err() != nil {
					return
				}
				cfg.Logger.Warn("reading the job backlog", "upstream", w.upstream, "err", err)
			} else {
				backlog = b
			}
			wait := cfg.PollInterval
			if sum(backlog) == 0 {
				if at, ok, err := w.s.store.NextAvailable(ctx, w.upstream); err == nil && ok {
					wait = min(wait, max(at.Sub(cfg.Clock.Now()), time.Millisecond))
				}
			}
			timer.Stop()
			timer.Reset(wait)
		}
		// Top up the admissions, round robin over the classes with work.
		for free := limit - running - sum(pending) - pendingHandoffs(); free > 0 && !refused; {
			added := false
			for c := range llm.NumPriorities {
				if free > 0 && backlog[c] > pending[c] {
					acquire(llm.Priority(c))
					free--
					added = true
				}
			}
			if !added {
				break
			}
		}
		if h != nil {
			if sum(pending) == 0 && sum(backlog) == 0 && w.s.spoolEmpty() {
				h.Offer(limit - running - pendingHandoffs())
			} else {
				h.Withdraw(-1) // queued jobs go before new ones
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			running--
		case g := <-grants:
			ready := [llm.NumPriorities][]admission{}
			refused = !w.collect(g, &pending, &ready) || refused
			for drained := false; !drained; {
				select {
				case g := <-grants:
					refused = !w.collect(g, &pending, &ready) || refused
				default:
					drained = true
				}
			}
			for c, tickets := range ready {
				if len(tickets) == 0 {
					continue
				}
				class := llm.Priority(c)
				// More tickets the engine grants at once, for one claim.
				for via := w.routeFor(class); len(tickets) < min(cfg.ClaimBatch, backlog[c]-pending[c]); {
					t, ok := via.dispatcher.TryAcquire(dispatch.AcquireParams{Priority: class, Client: jobsClient, Cost: w.costs.estimate(class)})
					if !ok {
						break
					}
					tickets = append(tickets, admission{ticket: t, via: via})
				}
				jobs := w.claim(ctx, class, len(tickets))
				for i, j := range jobs {
					start(j, tickets[i])
				}
				for _, a := range tickets[len(jobs):] {
					a.ticket.Release()
				}
				if len(jobs) < len(tickets) {
					// The backlog was stale (another node claimed them):
					// look again at the next poll or notification.
					backlog[c] = 0
					continue
				}
				backlog[c] = max(backlog[c]-len(jobs), 0)
				refresh = refresh || backlog[c] == 0 // used up: there may be more
			}
		case j := <-handed:
			takeHanded(j)
		case _, ok := <-notify:
			if !ok {
				return
			}
			refresh = true
		case <-timer.C():
			refresh, refused = true, false
		}
	}
}

// collect files a returned Acquire: a ticket by its class. It reports
// false for an error (the dispatcher stopped, or the loop is stopping).
func (w *worker) collect(g grant, pending *[llm.NumPriorities]int, ready *[llm.NumPriorities][]admission) bool {
	pending[g.class]--
	if g.err != nil {
		if errors.Is(g.err, dispatch.ErrTooLarge) {
			// A remembered cost no bucket can hold (its job died of it):
			// forget it, or the class could never be admitted again.
			w.costs.forget(g.class)
		}
		return false
	}
	ready[g.class] = append(ready[g.class], admission{ticket: g.ticket, via: g.via})
	return true
}

// claim claims up to limit available jobs of class.
func (w *worker) claim(ctx context.Context, class llm.Priority, limit int) []*jobstore.Job {
	cfg := w.s.cfg
	if !w.s.replaySpool(ctx) {
		return nil
	}
	jobs, err := w.s.store.Claim(ctx, jobstore.ClaimParams{
		Upstream: w.upstream,
		Priority: &class,
		Limit:    limit,
		Owner:    cfg.Owner,
		LeaseFor: cfg.LeaseFor,
		Now:      cfg.Clock.Now(),
	})
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
