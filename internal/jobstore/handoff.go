package jobstore

import (
	"fmt"
	"sync"
	"time"
)

// A Handoff is a local worker's standing offer to take jobs of one
// upstream straight from Insert: while the worker is idle (its last claim
// came back short) it offers free slots, and the store inserts a new job
// that is available at once already leased to that worker, in the same
// statement, and delivers it on Jobs. The job is as durable as any other
// (committed before Insert returns, running under a lease with a fencing
// token, rescued if the worker dies), but no claim statement, no NOTIFY and
// no wake-up stand between the submit and the start of the job.
//
// Only jobs that could be claimed at once are handed off: not jobs
// scheduled for later, not jobs of a paused upstream, not batch jobs, and
// never an existing job returned for an idempotency key. A handed-off job
// may start ahead of queued jobs that another node inserted while this
// worker was idle; the next claim picks those up.
//
// The worker side is Offer, Withdraw, Pending, Jobs and Close; the store
// calls take, deliver and untake.
type Handoff struct {
	upstream string
	owner    string
	leaseFor time.Duration
	jobs     chan *Job
	unlink   func(*Handoff)

	mu       sync.Mutex
	settled  *sync.Cond // broadcast when reserved falls to zero
	offered  int        // slots the store may still take
	reserved int        // taken by an insert in flight, not yet delivered
	closed   bool
}

// HandoffParams registers a Handoff.
type HandoffParams struct {
	// Upstream is the worker's upstream (required).
	Upstream string
	// Owner names the worker in the leases it takes (free text).
	Owner string
	// LeaseFor is the lease of a handed-off job, as in ClaimParams.
	LeaseFor time.Duration
	// Capacity bounds the slots ever offered at once: the worker's most
	// jobs in flight.
	Capacity int
}

func (p HandoffParams) validate() error {
	switch {
	case p.Upstream == "":
		return invalid("Upstream", "required")
	case p.LeaseFor <= 0:
		return invalid("LeaseFor", "must be positive")
	case p.Capacity < 1:
		return invalid("Capacity", "must be at least 1")
	}
	return nil
}

// Offer lets the store take up to n more jobs (replacing any earlier
// offer); the worker must be able to run n more than it runs now, on top of
// Pending. n is capped at the capacity left.
func (h *Handoff) Offer(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.offered = max(0, min(n, cap(h.jobs)-h.reserved-len(h.jobs)))
}

// Withdraw takes back up to n of the slots not yet taken (n < 0: all of
// them) and returns the slots the handoff still holds: those still offered
// plus Pending, read together. Before a claim, a worker withdraws the slots
// the claim may fill and claims at most its capacity, less its jobs in
// flight, less what Withdraw returned: claims and handoffs never overfill
// it, and the rest of the offer keeps taking inserts while the claim runs.
// (Withdrawing everything instead made every claim of an idle worker a
// window in which inserts queued, woke it and so caused the next claim.)
func (h *Handoff) Withdraw(n int) (held int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n < 0 {
		n = h.offered
	}
	h.offered -= min(n, h.offered)
	return h.offered + h.reserved + len(h.jobs)
}

// Pending counts jobs taken for this worker and not yet received from
// Jobs: count them as in flight.
func (h *Handoff) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reserved + len(h.jobs)
}

// Offered counts the slots the store may still take.
func (h *Handoff) Offered() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offered
}

// Jobs delivers the jobs handed off, leased to this worker.
func (h *Handoff) Jobs() <-chan *Job { return h.jobs }

// Close withdraws the handoff for good, waits for the inserts that took a
// slot to finish, and returns the jobs handed off but not received: they
// are leased to this worker, which must run them (or let their leases
// lapse, and the rescuer requeue them).
func (h *Handoff) Close() []*Job {
	h.unlink(h)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed, h.offered = true, 0
	for h.reserved > 0 {
		h.settled.Wait()
	}
	var left []*Job
	for len(h.jobs) > 0 {
		left = append(left, <-h.jobs)
	}
	return left
}

// take reserves one offered slot; false when none is offered.
func (h *Handoff) take() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.offered == 0 {
		return false
	}
	h.offered--
	h.reserved++
	return true
}

// deliver hands over a copy of a job leased in a reserved slot (the
// inserter keeps the original). It never blocks: the slot was offered
// within the channel's capacity.
func (h *Handoff) deliver(j *Job) {
	c := *j
	h.mu.Lock()
	defer h.mu.Unlock()
	h.release()
	h.jobs <- &c
}

// release ends a reservation; h.mu is held.
func (h *Handoff) release() {
	h.reserved--
	if h.reserved == 0 {
		h.settled.Broadcast()
	}
}

// untake releases a reserved slot whose job was not leased (the insert
// failed, met an existing key, or the upstream is paused). The slot is not
// offered again: the worker offers afresh when it next goes idle.
func (h *Handoff) untake() {
	h.mu.Lock()
	h.release()
	h.mu.Unlock()
}

// handoffs is a store's registry of handoffs by upstream; stores embed it,
// which gives them the Store's Handoff method.
type handoffs struct {
	mu sync.Mutex
	by map[string][]*Handoff
}

// Handoff registers a Handoff (see Store.Handoff).
func (hs *handoffs) Handoff(p HandoffParams) (*Handoff, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("registering handoff: %w", err)
	}
	h := &Handoff{upstream: p.Upstream, owner: p.Owner, leaseFor: p.LeaseFor,
		jobs: make(chan *Job, p.Capacity), unlink: hs.unregister}
	h.settled = sync.NewCond(&h.mu)
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.by == nil {
		hs.by = map[string][]*Handoff{}
	}
	hs.by[p.Upstream] = append(hs.by[p.Upstream], h)
	return h, nil
}

func (hs *handoffs) unregister(h *Handoff) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	list := hs.by[h.upstream]
	for i, x := range list {
		if x == h {
			hs.by[h.upstream] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(hs.by[h.upstream]) == 0 {
		delete(hs.by, h.upstream)
	}
}

// handoffFor finds a handoff of p's upstream with a free slot for a job that
// could be claimed at once, and reserves the slot.
func (hs *handoffs) handoffFor(p InsertParams) *Handoff {
	if p.AvailableAt.After(p.Now) || (!p.Deadline.IsZero() && !p.Deadline.After(p.Now)) {
		return nil
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range hs.by[p.Upstream] {
		if h.take() {
			return h
		}
	}
	return nil
}

// leasedJob is the job p becomes with id when handed to h.
func leasedJob(p InsertParams, id int64, h *Handoff) *Job {
	j := insertedJob(p, id)
	j.State = StateRunning
	j.Lease = Lease{Token: 1, Owner: h.owner, ExpiresAt: storeTime(p.Now.Add(h.leaseFor))}
	return j
}

// insertedJob is the queued job p becomes with id.
func insertedJob(p InsertParams, id int64) *Job {
	return &Job{ID: id, IdempotencyKey: p.IdempotencyKey, Upstream: p.Upstream,
		Priority: p.Priority, Client: p.Client, Path: p.Path, Body: p.Body, Deadline: p.Deadline,
		MaxAttempts: p.MaxAttempts, State: StateQueued, AvailableAt: p.AvailableAt, WebhookURL: p.WebhookURL,
		CustomID: p.CustomID, RunID: p.RunID, CreatedAt: p.Now, UpdatedAt: p.Now}
}
