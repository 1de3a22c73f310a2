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
	s := w.s
	cfg := s.cfg
	wait := writeRetryFirst
	holding := false
	spooled := "" // the spool entry this worker owns, holding v
	triedSpool := keepable(v) && s.storeAway.Load()
	if triedSpool {
		spooled = w.spoolFirst(j, v, errStoreAway)
	}
	// settle ends the spool entry's ownership: the store has the answer
	// (or refuses it for good), or the write-back is to apply it.
	settle := func(kept bool) {
		switch {
		case spooled == "":
		case kept:
			s.spool.release(spooled)
		default:
			if err := s.spool.remove(spooled); err != nil {
				// Written back again later, the store's state stands.
				cfg.Logger.Error("removing a job result's spool entry", "job", j.ID, "err", err)
				s.spool.release(spooled)
			}
		}
		spooled = ""
	}
	defer func() { settle(true) }() // no path leaves an entry owned
	for tries := 1; ; tries++ {
		st, err := w.writeOnce(j, v)
		switch {
		case err == nil:
			s.storeAway.Store(false)
			settle(false)
			return w.recorded(j, v, st)
		case errors.Is(err, jobstore.ErrLeaseLost), errors.Is(err, jobstore.ErrNotFound):
			if v.complete == nil || errors.Is(context.Cause(ctx), errJobCanceled) {
				settle(false)
				return AttemptLeaseLost
			}
			// The rescuer requeued the job while the store could not hear
			// the heartbeats: offer the answer through CompleteSpooled,
			// which takes it while the job is live, so that no claim here
			// starts the job's call meanwhile.
			taken, cerr := s.answers.completeLost(j.ID, j.Lease.Token, holding, cfg.Clock.Now(), cfg.LeaseFor,
				func() error { return w.completeSpooled(j, v) })
			switch {
			case taken:
				return AttemptLeaseLost // a claim here writes the answer
			case cerr == nil:
				settle(false)
				return w.recorded(j, v, jobstore.StateSucceeded)
			case spooled != "" && errors.Is(cerr, jobstore.ErrUnavailable):
				settle(true) // the write-back completes it once the store answers
				return AttemptStoreError
			case !holding || !errors.Is(cerr, jobstore.ErrUnavailable):
				settle(false)
				return AttemptLeaseLost
			}
			err = cerr // the store went away again: keep holding
		}
		if errors.Is(err, jobstore.ErrUnavailable) {
			s.storeAway.Store(true)
		}
		if !triedSpool && keepable(v) {
			// Kept on disk before anything else, so a crash while the
			// store is away cannot lose a paid answer.
			triedSpool = true
			spooled = w.spoolFirst(j, v, err)
		}
		now := cfg.Clock.Now()
		stopping := w.jobCtx.Err() != nil || s.stopping.Err() != nil
		// Trust the lease only while one more heartbeat could renew it
		// before it runs out (the rescuer goes by the store's copy).
		trusted := now.Add(wait).Before(l.trustedUntil().Add(-cfg.HeartbeatEvery))
		if stopping || !trusted {
			if !keepable(v) {
				// A retry or reschedule: the job is called again anyway.
				cfg.Logger.Warn("recording job result", "job", j.ID, "err", err)
				return AttemptStoreError
			}
			if spooled != "" {
				settle(true) // the write-back applies it before any claim
				cfg.Logger.Warn("kept a job result in the spool until the store answers", "job", j.ID, "err", err)
				return AttemptStoreError
			}
			if w.spoolResult(j, v, err) {
				return AttemptStoreError
			}
			if stopping {
				cfg.Logger.Error("dropping a job result the store could not take: the job will be called again",
					"job", j.ID, "err", err)
				return AttemptStoreError
			}
			// The spool cannot take it (full, on the full disk, or none):
			// hold it here and go on retrying. A claim of the job in this
			// process (after a rescue) takes the answer instead of calling.
			if !holding {
				holding = true
				s.answers.hold(j.ID, j.Lease.Token, v)
				defer s.answers.unhold(j.ID, j.Lease.Token)
			}
		}
		if tries == 1 {
			cfg.Logger.Warn("recording job result; retrying while the lease holds", "job", j.ID, "err", err, "spooled", spooled != "")
		}
		t := cfg.Clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-w.jobCtx.Done():
		case <-s.stopping.Done(): // one last try, then the spool
		}
		t.Stop()
		wait = min(2*wait, writeRetryMax)
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
