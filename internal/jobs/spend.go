package jobs

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/dispatch"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// noHold is the hold of a call without budgets.
type noHold struct{}

func (noHold) Settle(dispatch.End, bool) float64 { return 0 }

// reserveSpend reserves req, sent to upstream, against its client's
// budget (Config.Spend).
func (w *worker) reserveSpend(upstream string, req *dispatch.Request) (SpendHold, error) {
	if w.s.cfg.Spend == nil {
		return noHold{}, nil
	}
	h, err := w.s.cfg.Spend.Reserve(upstream, req)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return noHold{}, nil
	}
	return h, nil
}

// budgetRefused is the verdict of a call its client's budget refused:
// nothing was sent, so no attempt burns. A budget that resets (or is held
// by calls in flight) reschedules the job for then, with the reason in its
// history; one that never will (a total cap, a request larger than the
// budget) kills it with the refusal as its error.
func (w *worker) budgetRefused(j *jobstore.Job, err error) verdict {
	be, ok := errors.AsType[*BudgetError](err)
	if !ok {
		be = &BudgetError{Status: http.StatusInternalServerError, Message: "checking the spend budget: " + err.Error()}
	}
	e := jobstore.AttemptError{Status: be.Status, Kind: llm.ClientError.String(), Message: be.Message}
	if be.RetryAt.IsZero() {
		return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailTerminal, Error: e}, outcome: AttemptDead}
	}
	e.Kind = llm.Rate.String()
	if wait := be.RetryAt.Sub(w.s.cfg.Clock.Now()); wait > 0 {
		e.RetryAfter = wait
	}
	return verdict{fail: &jobstore.FailParams{Kind: jobstore.FailReschedule, Error: e, RetryAt: be.RetryAt}, outcome: AttemptRateLimited}
}
