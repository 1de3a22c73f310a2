package jobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/clock"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// workerLoop is one worker's loop and its state. It keeps up to
// MaxInFlightPerUpstream admissions outstanding (Acquire calls waiting plus
// calls in flight), spread round robin over the classes with a backlog and
// never more per class than its backlog. When a ticket is admitted it
// collects the other tickets already admitted, adds the ones the engine
// admits at once (TryAcquire), and claims that many jobs of the class in
// one statement; tickets left without a job are given back. While it has
// nothing to wait for it offers its free slots through a jobstore.Handoff,
// so jobs submitted meanwhile start without a claim.
//
// Its state belongs to the loop's goroutine: the Acquire calls and the
// jobs it starts report back through channels (returns, done) and never
// touch it. One turn of the loop (run) is its steps in order:
//
//	refreshBacklog  when due: the spool written back, the backlog per class read, the poll timer set
//	askUrgent       when due: per class, an Acquire on the fallback that takes the jobs whose
//	                deadline the upstream's predicted wait would miss
//	topUp           Acquire calls asked, round robin over the classes with work
//	offerHandoff    the free slots offered to jobs submitted meanwhile, or withdrawn
//	wait            one event: a job done, Acquire calls returned (onReturns → claimAndStart), a
//	                handed-off job (takeHanded), a notification or the poll timer
//
// and close ends it.
type workerLoop struct {
	w     *worker
	ctx   context.Context // ends when the service stops claiming
	limit int             // MaxInFlightPerUpstream

	done    chan struct{} // a job started here finished
	returns chan acquired // an Acquire returned
	notify  <-chan struct{}
	poll    clock.Timer
	handoff *jobstore.Handoff // nil: none could be registered
	handed  <-chan *jobstore.Job

	acqCtx        context.Context // the Acquire calls'; canceled by close
	stopAcquiring context.CancelFunc
	acquiring     sync.WaitGroup

	pending [llm.NumPriorities]int // Acquire calls outstanding
	urgent  [llm.NumPriorities]int // of them, urgent routes' (askUrgent): not counted against the backlog
	// urgentDue: each class's urgent route is asked for at the next turn
	// (once per backlog read).
	urgentDue [llm.NumPriorities]bool
	backlog   [llm.NumPriorities]int // available jobs known, less those claimed since
	running   int                    // jobs started here and not done
	refresh   bool                   // read the backlog before the next top-up
	refused   bool                   // an Acquire failed (the engine stopped): none until the next poll
}

// loop runs the worker until ctx ends (the service stops claiming) or the
// store's notifications end.
func (w *worker) loop(ctx context.Context) {
	l := w.newLoop(ctx)
	defer l.close()
	l.run()
}

// newLoop registers the worker's handoff and returns its loop, due to read
// the backlog first.
func (w *worker) newLoop(ctx context.Context) *workerLoop {
	cfg := w.s.cfg
	l := &workerLoop{w: w, ctx: ctx, limit: cfg.MaxInFlightPerUpstream, refresh: true}
	l.done = make(chan struct{}, l.limit)
	l.returns = make(chan acquired, l.limit)
	l.notify = w.s.store.Notify(ctx, w.upstream)
	l.poll = cfg.Clock.NewTimer(cfg.PollInterval)
	l.acqCtx, l.stopAcquiring = context.WithCancel(ctx)
	if w.route.Enabled() {
		// A job handed off at insert would skip the routing: an upstream
		// that routes to its Batch API claims every job.
		return l
	}
	h, err := w.s.store.Handoff(jobstore.HandoffParams{Upstream: w.upstream, Owner: cfg.Owner,
		LeaseFor: cfg.LeaseFor, Capacity: l.limit})
	if err != nil {
		cfg.Logger.Warn("registering job handoff", "upstream", w.upstream, "err", err)
	}
	if h != nil {
		l.handoff, l.handed = h, h.Jobs()
	}
	return l
}

// run turns the loop until it must end.
func (l *workerLoop) run() {
	for {
		if l.refresh && !l.refreshBacklog() {
			return
		}
		l.askUrgent()
		l.topUp()
		l.offerHandoff()
		if !l.wait() {
			return
		}
	}
}

// close ends the loop: the jobs leased to it through the handoff go back
// to the queue, the Acquire calls still waiting are stopped, and the
// tickets admitted to them are released.
func (l *workerLoop) close() {
	if l.handoff != nil {
		for _, j := range l.handoff.Close() {
			l.w.handBack(j)
		}
	}
	l.stopAcquiring()
	l.acquiring.Wait()
	close(l.returns)
	for g := range l.returns {
		if g.ticket != nil {
			g.ticket.Release()
		}
	}
	l.poll.Stop()
}

// refreshBacklog reads the store's backlog per class and sets the poll
// timer. Spooled results go back to the store first: a job whose answer
// is spooled is not called again, so while the spool cannot be written
// back the backlog is taken as empty. It reports false when the loop must
// end.
func (l *workerLoop) refreshBacklog() bool {
	l.refresh = false
	s, cfg := l.w.s, l.w.s.cfg
	if !s.replaySpool(l.ctx) {
		l.backlog = [llm.NumPriorities]int{}
	} else if b, err := s.store.Backlog(l.ctx, l.w.upstream, cfg.Clock.Now(), l.limit); err != nil {
		if l.ctx.Err() != nil {
			return false
		}
		cfg.Logger.Warn("reading the job backlog", "upstream", l.w.upstream, "err", err)
	} else {
		l.backlog = b
	}
	for c := range l.urgentDue {
		l.urgentDue[c] = true
	}
	l.resetPoll()
	return true
}

// resetPoll sets the poll timer to PollInterval, or sooner when no job is
// available now but one will be before then.
func (l *workerLoop) resetPoll() {
	s, cfg := l.w.s, l.w.s.cfg
	wait := cfg.PollInterval
	if sum(l.backlog) == 0 {
		if at, ok, err := s.store.NextAvailable(l.ctx, l.w.upstream); err == nil && ok {
			wait = min(wait, max(at.Sub(cfg.Clock.Now()), time.Millisecond))
		}
	}
	l.poll.Stop()
	l.poll.Reset(wait)
}

// topUp asks for admissions up to the free slots, round robin over the
// classes with work, never more per class than its backlog; none while
// refused.
func (l *workerLoop) topUp() {
	for free := l.free(); free > 0 && !l.refused; {
		added := false
		for c := range llm.NumPriorities {
			if free > 0 && l.backlog[c] > l.pending[c]-l.urgent[c] {
				l.acquire(llm.Priority(c))
				free--
				added = true
			}
		}
		if !added {
			return
		}
	}
}

// free is how many more admissions the loop may have outstanding.
func (l *workerLoop) free() int {
	return l.limit - l.running - sum(l.pending) - l.pendingHandoffs()
}

// pendingHandoffs is how many handed-off jobs are on their way to the
// loop.
func (l *workerLoop) pendingHandoffs() int {
	if l.handoff == nil {
		return 0
	}
	return l.handoff.Pending()
}

// acquire asks the engine of class c's route for an admission; the ticket
// (or the error) comes back through returns.
func (l *workerLoop) acquire(c llm.Priority) {
	l.acquireVia(c, l.w.routeFor(c))
}

// askUrgent asks, once per backlog read, for each class with a backlog
// and a free slot, for an admission on the fallback the admission layer
// names for the class's jobs whose deadline the upstream's predicted wait
// would miss (admit.JobRoute.Urgent); its ticket claims only such jobs. It
// waits no longer than that wait: past it, the upstream takes them as
// soon.
func (l *workerLoop) askUrgent() {
	for c := range llm.NumPriorities {
		if !l.urgentDue[c] || l.backlog[c] == 0 || l.urgent[c] > 0 || l.free() <= 0 {
			continue
		}
		l.urgentDue[c] = false
		if via, ok := l.w.urgentFor(llm.Priority(c)); ok {
			l.urgent[c]++
			l.acquireVia(llm.Priority(c), via)
		}
	}
}

// acquireVia asks via's engine for an admission in class c; the ticket
// (or the error) comes back through returns.
func (l *workerLoop) acquireVia(c llm.Priority, via route) {
	l.pending[c]++
	l.acquiring.Add(1)
	w, ctx, returns := l.w, l.acqCtx, l.returns
	go func() {
		defer l.acquiring.Done()
		t, err := via.dispatcher.Acquire(ctx, dispatch.AcquireParams{Priority: c, Client: jobsClient, Cost: w.costs.estimate(c), Deadline: via.by})
		returns <- acquired{class: c, via: via, ticket: t, err: err}
	}()
}

// offerHandoff offers the free slots to jobs submitted meanwhile when there
// is nothing to wait for (no Acquire pending, no backlog, no spooled
// result), and withdraws the offer otherwise: queued jobs go before new
// ones.
func (l *workerLoop) offerHandoff() {
	if l.handoff == nil {
		return
	}
	if sum(l.pending) == 0 && sum(l.backlog) == 0 && l.w.s.spoolEmpty() {
		l.handoff.Offer(l.limit - l.running - l.pendingHandoffs())
	} else {
		l.handoff.Withdraw(-1)
	}
}

// wait waits for one event and handles it. It reports false when the loop
// must end.
func (l *workerLoop) wait() bool {
	select {
	case <-l.ctx.Done():
		return false
	case <-l.done:
		l.running--
	case g := <-l.returns:
		l.onReturns(g)
	case j := <-l.handed:
		l.takeHanded(j)
	case _, ok := <-l.notify:
		if !ok {
			return false
		}
		l.refresh = true
	case <-l.poll.C():
		l.refresh, l.refused = true, false
	}
	return true
}

// onReturns files g and the other Acquire calls already returned by class,
// then claims jobs for the tickets, class by class: the urgent routes'
// first.
func (l *workerLoop) onReturns(g acquired) {
	var ready, urgent [llm.NumPriorities][]admission
	l.collect(g, &ready, &urgent)
	for drained := false; !drained; {
		select {
		case g := <-l.returns:
			l.collect(g, &ready, &urgent)
		default:
			drained = true
		}
	}
	for c, tickets := range urgent {
		for _, a := range tickets {
			l.claimUrgent(llm.Priority(c), a)
		}
	}
	for c, tickets := range ready {
		if len(tickets) > 0 {
			l.claimAndStart(llm.Priority(c), tickets)
		}
	}
}

// collect files a returned Acquire: a ticket by its class (an urgent
// route's apart). An error (the dispatcher stopped, or the loop is
// stopping) refuses further Acquire calls until the next poll; an urgent
// route's (its wait outlived its jobs' deadlines) only ends that Acquire.
func (l *workerLoop) collect(g acquired, ready, urgent *[llm.NumPriorities][]admission) {
	l.pending[g.class]--
	if !g.via.by.IsZero() {
		l.urgent[g.class]--
		if g.err == nil {
			urgent[g.class] = append(urgent[g.class], admission{ticket: g.ticket, via: g.via})
		}
		return
	}
	if g.err != nil {
		if errors.Is(g.err, dispatch.ErrTooLarge) {
			// A remembered cost no bucket can hold (its job died of it):
			// forget it, or the class could never be admitted again.
			l.w.costs.forget(g.class)
		}
		l.refused = true
		return
	}
	ready[g.class] = append(ready[g.class], admission{ticket: g.ticket, via: g.via})
}

// claimAndStart claims one job of class per ticket (with the tickets the
// engine admits at once added), starts each with its ticket, and releases
// the tickets left without a job.
func (l *workerLoop) claimAndStart(class llm.Priority, tickets []admission) {
	tickets = l.admittedAtOnce(class, tickets)
	jobs := l.w.claim(l.ctx, class, len(tickets), time.Time{})
	for i, j := range jobs {
		l.start(j, tickets[i])
	}
	for _, a := range tickets[len(jobs):] {
		a.ticket.Release()
	}
	if len(jobs) < len(tickets) {
		// The backlog was stale (another node claimed them): look again
		// at the next poll or notification.
		l.backlog[class] = 0
		return
	}
	l.backlog[class] = max(l.backlog[class]-len(jobs), 0)
	l.refresh = l.refresh || l.backlog[class] == 0 // used up: there may be more
}

// claimUrgent claims one job of class whose deadline is at or before the
// urgent route's (a.via.by) and starts it with a, or gives a back when
// there is none: the backlog may hold none such.
func (l *workerLoop) claimUrgent(class llm.Priority, a admission) {
	jobs := l.w.claim(l.ctx, class, 1, a.via.by)
	if len(jobs) == 0 {
		a.ticket.Release()
		return
	}
	l.start(jobs[0], a)
	l.backlog[class] = max(l.backlog[class]-1, 0)
}

// admittedAtOnce adds to tickets the ones the engine admits in class at once,
// for one claim: up to ClaimBatch, and no more than the class's backlog
// not already asked for.
func (l *workerLoop) admittedAtOnce(class llm.Priority, tickets []admission) []admission {
	w := l.w
	for via := w.routeFor(class); len(tickets) < min(w.s.cfg.ClaimBatch, l.backlog[class]-l.pending[class]); {
		t, ok := via.dispatcher.TryAcquire(dispatch.AcquireParams{Priority: class, Client: jobsClient, Cost: w.costs.estimate(class)})
		if !ok {
			break
		}
		tickets = append(tickets, admission{ticket: t, via: via})
	}
	return tickets
}

// takeHanded runs a job handed off to the loop if the engine admits it at
// once, and otherwise hands it back: it never waits under its lease.
func (l *workerLoop) takeHanded(j *jobstore.Job) {
	w := l.w
	via := w.routeForJob(j.Priority, j.Deadline)
	if t, ok := via.dispatcher.TryAcquire(dispatch.AcquireParams{Priority: j.Priority, Client: j.Client,
		Cost: w.costs.estimate(j.Priority)}); ok {
		l.start(j, admission{ticket: t, via: via})
		return
	}
	w.handBack(j)
}

// start runs j with its admission in a goroutine of its own, which reports
// through done when the job is over.
func (l *workerLoop) start(j *jobstore.Job, a admission) {
	l.running++
	w, done := l.w, l.done
	w.s.jobs.Add(1)
	go func() {
		defer w.s.jobs.Done()
		w.run(j, a)
		done <- struct{}{}
	}()
}
