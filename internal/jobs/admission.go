package jobs

import (
	"cmp"
	"errors"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/admit"
	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// noAdmission settles the call of a runtime without an admission layer.
type noAdmission struct{}

func (noAdmission) Settle(dispatch.End, bool) float64 { return 0 }

// admitCall asks the admission layer whether req may go to via now: its
// client's budget and its client's own limit there (the same calls as a
// live request's, at once rather than waited for).
func (w *worker) admitCall(via route, req *dispatch.Request) (admit.Settler, error) {
	a := w.s.cfg.Admission
	if a == nil || via.target.Upstream == "" {
		return noAdmission{}, nil
	}
	return a.AdmitNow(via.target, req)
}

// notAdmitted is the verdict of a call the admission layer held back or
// refused: nothing was sent, so no attempt burns.
//
//   - its client's own limit (*admit.HeldError): the job comes back at its
//     client's next free turn, with no entry in its history (the history
//     lists calls) and never recorded as a rate limit;
//   - its client's budget (*admit.RefusalError) that resets, or is held by
//     calls in flight: rescheduled for then, with the refusal in its
//     history (kind "budget");
//   - a budget that never will (a total cap, a request larger than the
//     budget, an unpriced model): the job dies with the refusal as its
//     error.
func (w *worker) notAdmitted(err error) verdict { return notAdmitted(err, w.s.cfg.Clock.Now()) }

// notAdmitted is the verdict of a call refused at now (worker.notAdmitted).
func notAdmitted(err error, now time.Time) verdict {
	if h, ok := errors.AsType[*admit.HeldError](err); ok {
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, RetryAt: h.RetryAt}, outcome: AttemptHeld, heldBy: h.Limit}
	}
	if de, ok := errors.AsType[*dispatch.Error](err); ok {
		// A call its client's own limit can never take (larger than its
		// tokens_per_minute).
		e := jobstore.AttemptError{Status: de.Status, Kind: llm.ClientError.String(), Message: de.Message}
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e}, outcome: AttemptDead}
	}
	r, ok := errors.AsType[*admit.RefusalError](err)
	if !ok {
		e := jobstore.AttemptError{Status: http.StatusInternalServerError, Kind: budgetKind, Message: "admitting the call: " + err.Error()}
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e}, outcome: AttemptDead}
	}
	e := jobstore.AttemptError{Status: r.Problem.Status, Kind: cmp.Or(r.Reason, budgetKind), Message: r.Problem.Message}
	if r.RetryAt.IsZero() {
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e}, outcome: AttemptDead}
	}
	if wait := r.RetryAt.Sub(now); wait > 0 {
		e.RetryAfter = wait
	}
	return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: e, RetryAt: r.RetryAt}, outcome: AttemptHeld}
}

// budgetKind is the history kind of a call its client's budget refused:
// not a provider's answer.
const budgetKind = "budget"
