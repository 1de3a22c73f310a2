package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/jobstore"
)

// Result-write retry backoff: the first wait, doubling up to the cap.
const (
	writeRetryFirst = 100 * time.Millisecond
	writeRetryMax   = 5 * time.Second
)

// write records v with the job's fencing token and returns the attempt's
// outcome. A lost lease means another worker (or a cancel) owns the job
// now: nothing is overwritten (but a success is still offered through
// CompleteSpooled, which takes it only if the job is live: a rescued job
// need not be called again). A success or a terminal failure the store
// cannot take goes to the spool at once (before the first write while
// the store is known to be away), so that a crash from then on cannot
// lose it; the worker keeps the entry as its own and goes on writing with
// backoff on the clock while the lease can be trusted (the heartbeat keeps
// renewing it), and removes it once the store took the answer. Past that
// point, or when the service stops, the entry goes to the write-back
// before any claim. When the spool cannot take the answer it is held in
// memory (heldAnswers) and retried until the service stops.
func (w *worker) write(ctx context.Context, j *jobstore.Job, v verdict, l *lease) AttemptOutcome {
	rw := &resultWrite{w: w, ctx: ctx, j: j, v: v, l: l}
	if keepable(v) && w.s.storeAway.Load() {
		rw.triedSpool = true
		rw.spooled = w.spoolFirst(j, v, errStoreAway)
	}
	defer rw.end()
	wait := writeRetryFirst
	for tries := 1; ; tries++ {
		out, done, err := rw.try()
		if done {
			return out
		}
		if out, done := rw.untrusted(err, wait); done {
			return out
		}
		if tries == 1 {
			w.s.cfg.Logger.Warn("recording job result; retrying while the lease holds", "job", j.ID, "err", err, "spooled", rw.spooled != "")
		}
		rw.pause(wait)
		wait = min(2*wait, writeRetryMax)
	}
}

// resultWrite is one write of a verdict (worker.write) and what it holds
// across its tries.
type resultWrite struct {
	w   *worker
	ctx context.Context
	j   *jobstore.Job
	v   verdict
	l   *lease
	// spooled is the spool entry this write owns, holding v ("": none);
	// triedSpool says the spool was offered v already.
	spooled    string
	triedSpool bool
	// holding: v is held in memory (heldAnswers) past the lease.
	holding bool
}

// end leaves nothing owned: the answer held in memory is withdrawn (unless
// a claim took it) and a spool entry still owned goes to the write-back.
func (rw *resultWrite) end() {
	if rw.holding {
		rw.w.s.answers.unhold(rw.j.ID, rw.j.Lease.Token)
	}
	rw.settle(true)
}

// settle ends the spool entry's ownership: the store has the answer (or
// refuses it for good: kept false, the entry is removed), or the
// write-back is to apply it (kept true).
func (rw *resultWrite) settle(kept bool) {
	s := rw.w.s
	switch {
	case rw.spooled == "":
	case kept:
		s.spool.release(rw.spooled)
	default:
		if err := s.spool.remove(rw.spooled); err != nil {
			// Written back again later, the store's state stands.
			s.cfg.Logger.Error("removing a job result's spool entry", "job", rw.j.ID, "err", err)
			s.spool.release(rw.spooled)
		}
	}
	rw.spooled = ""
}

// try makes one store write of the verdict. done reports that the write
// is over with out; otherwise err is why the store did not take it, and
// the answer is on disk if it is worth keeping (spoolFirst).
func (rw *resultWrite) try() (out AttemptOutcome, done bool, err error) {
	w, s, j, v := rw.w, rw.w.s, rw.j, rw.v
	st, err := w.writeOnce(j, v)
	switch {
	case err == nil:
		s.storeAway.Store(false)
		rw.settle(false)
		return w.recorded(j, v, st), true, nil
	case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
		if out, done, err = rw.lost(); done {
			return out, true, nil
		}
	}
	if errors.Is(err, jobstore.ErrUnavailable) {
		s.storeAway.Store(true)
	}
	if !rw.triedSpool && keepable(v) {
		// Kept on disk before anything else, so a crash while the store is
		// away cannot lose a paid answer.
		rw.triedSpool = true
		rw.spooled = w.spoolFirst(j, v, err)
	}
	return "", false, err
}

// lost handles a write the store refused because the lease is lost: a
// canceled job or a failure is dropped; a success whose job the rescuer
// requeued while the store could not hear the heartbeats is offered
// through CompleteSpooled, which takes it while the job is live, so that
// no claim here starts the job's call meanwhile. done false: the store
// went away again while the answer is held (err), keep trying.
func (rw *resultWrite) lost() (out AttemptOutcome, done bool, err error) {
	w, s, j, v := rw.w, rw.w.s, rw.j, rw.v
	if v.complete == nil || errors.Is(context.Cause(rw.ctx), errJobCanceled) {
		rw.settle(false)
		return AttemptLeaseLost, true, nil
	}
	taken, cerr := s.answers.completeLost(j.ID, j.Lease.Token, rw.holding, s.cfg.Clock.Now(), s.cfg.LeaseFor,
		func() error { return w.completeSpooled(j, v) })
	switch {
	case taken:
		return AttemptLeaseLost, true, nil // a claim here writes the answer
	case cerr == nil:
		rw.settle(false)
		return w.recorded(j, v, jobstore.StateSucceeded), true, nil
	case rw.spooled != "" && errors.Is(cerr, jobstore.ErrUnavailable):
		rw.settle(true) // the write-back completes it once the store answers
		return AttemptStoreError, true, nil
	case !rw.holding || !errors.Is(cerr, jobstore.ErrUnavailable):
		rw.settle(false)
		return AttemptLeaseLost, true, nil
	}
	return "", false, cerr
}

// untrusted decides, after a failed try (err) with wait to the next, what
// happens once the lease can no longer be trusted (one more heartbeat
// could not renew it before it runs out: the rescuer goes by the store's
// copy) or the service stops: a retry or reschedule is dropped (the job is
// called again anyway), a spooled answer is left to the write-back, an
// answer not spooled yet is spooled; one the spool cannot take is dropped
// at a stop and otherwise held in memory while the write goes on (done
// false).
func (rw *resultWrite) untrusted(err error, wait time.Duration) (out AttemptOutcome, done bool) {
	w, s, j, v := rw.w, rw.w.s, rw.j, rw.v
	cfg := s.cfg
	stopping := w.jobCtx.Err() != nil || s.stopping.Err() != nil
	trusted := cfg.Clock.Now().Add(wait).Before(rw.l.trustedUntil().Add(-cfg.HeartbeatEvery))
	switch {
	case !stopping && trusted:
		return "", false
	case !keepable(v):
		cfg.Logger.Warn("recording job result", "job", j.ID, "err", err)
		return AttemptStoreError, true
	case rw.spooled != "":
		rw.settle(true) // the write-back applies it before any claim
		cfg.Logger.Warn("kept a job result in the spool until the store answers", "job", j.ID, "err", err)
		return AttemptStoreError, true
	case w.spoolResult(j, v, err):
		return AttemptStoreError, true
	case stopping:
		cfg.Logger.Error("dropping a job result the store could not take: the job will be called again", "job", j.ID, "err", err)
		return AttemptStoreError, true
	}
	// The spool cannot take it (full, on the full disk, or none): hold it
	// here and go on retrying. A claim of the job in this process (after a
	// rescue) takes the answer instead of calling.
	if !rw.holding {
		rw.holding = true
		s.answers.hold(j.ID, j.Lease.Token, v)
	}
	return "", false
}

// pause waits out wait on the clock before the next try, or less when the
// job's context ends or the service stops (one last try, then the spool).
func (rw *resultWrite) pause(wait time.Duration) {
	s := rw.w.s
	t := s.cfg.Clock.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
	case <-rw.w.jobCtx.Done():
	case <-s.stopping.Done():
	}
}

// errStoreAway is why an answer is spooled before its first write: the
// store failed the last write this service made.
var errStoreAway = errors.New("the job store failed the last result write")

// spoolFirst writes v to the spool as an entry this worker owns, after
// the store failed with cause, and returns its name ("": the spool could
// not take it; the answer stays in memory).
func (w *worker) spoolFirst(j *jobstore.Job, v verdict, cause error) string {
	s := w.s
	if s.spool == nil {
		return ""
	}
	name, err := s.spool.putOwned(w.spoolEntry(j, v))
	if err != nil {
		s.cfg.Logger.Warn("spooling a job result the store could not take: it is held in memory", "job", j.ID, "err", err, "store_err", cause)
		return ""
	}
	return name
}

// keepable reports whether v is worth keeping past its lease: a success
// or a terminal failure (a retry or reschedule calls the job again in any
// case).
func keepable(v verdict) bool {
	return v.complete != nil || (v.fail != nil && v.fail.Kind == jobstore.FailTerminal)
}

// writeOnce makes one attempt at the store write of v.
func (w *worker) writeOnce(j *jobstore.Job, v verdict) (jobstore.State, error) {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	now := s.cfg.Clock.Now()
	if v.complete != nil {
		return jobstore.StateSucceeded, s.store.Complete(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: *v.complete, Now: now})
	}
	p := *v.fail
	p.ID, p.Token, p.Now = j.ID, j.Lease.Token, now
	return s.store.Fail(ctx, p)
}

// completeSpooled writes a success whose lease was lost through
// CompleteSpooled.
func (w *worker) completeSpooled(j *jobstore.Job, v verdict) error {
	s := w.s
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.jobCtx), handBackTimeout)
	defer cancel()
	return s.store.CompleteSpooled(ctx, jobstore.CompleteParams{ID: j.ID, Token: j.Lease.Token, Result: *v.complete, Now: s.cfg.Clock.Now()})
}

// spoolResult keeps v in the spool after the store failed with cause, and
// reports whether it did.
func (w *worker) spoolResult(j *jobstore.Job, v verdict, cause error) bool {
	s := w.s
	if s.spool == nil {
		return false
	}
	if err := s.spool.put(w.spoolEntry(j, v)); err != nil {
		s.cfg.Logger.Warn("spooling a job result the store could not take", "job", j.ID, "err", err, "store_err", cause)
		return false
	}
	s.cfg.Logger.Warn("kept a job result in the spool until the store answers", "job", j.ID, "err", cause)
	return true
}

// spoolEntry is v's spool entry, under j's lease.
func (w *worker) spoolEntry(j *jobstore.Job, v verdict) spoolEntry {
	return spoolEntry{JobID: j.ID, Token: j.Lease.Token, Upstream: w.upstream, WebhookURL: j.WebhookURL, BodySHA256: bodyHash(j.Body),
		Complete: v.complete, Fail: v.fail, SpooledAt: w.s.cfg.Clock.Now()}
}

// recorded accounts for v written in state st.
func (w *worker) recorded(j *jobstore.Job, v verdict, st jobstore.State) AttemptOutcome {
	if !st.Finished() {
		return v.outcome
	}
	w.s.finishedHere(w.upstream, j.WebhookURL, st)
	if st == jobstore.StateDead {
		return AttemptDead // a retry or reschedule past the job's attempts or deadline
	}
	return v.outcome
}

// finishedHere announces a job this process finished: metrics, long
// polls, its webhook.
func (s *Service) finishedHere(upstream, webhookURL string, st jobstore.State) {
	s.cfg.Observer.Finished(upstream, st, 1)
	s.announce()
	if webhookURL != "" {
		s.hooks.kick() // the store wrote its outbox row with the result
	}
}
