package admit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/pricing"
	"github.com/sluicehq/sluice/internal/quota"
)

// RefusalError is a request the admission layer refused before anything was
// sent, answered the same on every door: the proxy renders Problem; a job
// waits in the store until RetryAt without an attempt, or dies with the
// refusal when RetryAt is zero (a budget that never resets, a request its
// budget can never hold, an unpriced model).
type RefusalError struct {
	Problem frontdoor.Problem
	RetryAt time.Time
	// Reason is what refused it: RefusedBudget, RefusedServiceTier or
	// RefusedAccess.
	Reason string
	err    error
}

func (r *RefusalError) Error() string { return r.Problem.Message }
func (r *RefusalError) Unwrap() error { return r.err }

// refusal is the RefusalError of a request to t that its budget (or the price
// table) refused with err.
func (l *Layer) refusal(t Target, err error) *RefusalError {
	now := l.clock.Now()
	r := &RefusalError{Reason: RefusedBudget, Problem: spendProblem(t.Protocol, err, now), err: err}
	if r.Problem.RetryAfter > 0 {
		r.RetryAt = now.Add(r.Problem.RetryAfter)
	}
	return r
}

// BudgetPendingRetryAfter is the retry-after of a request refused while
// its client's budget is held by reservations in flight: they usually
// settle below their worst case within seconds.
const BudgetPendingRetryAfter = 2 * time.Second

// ErrSpendNotLoaded refuses a request of a client with a budget while
// the store its spend is kept in has not connected yet
// (Layer.AwaitSpendStore).
var ErrSpendNotLoaded = errors.New("the spend store is not connected yet")

// SpendNotLoadedRetryAfter is the retry-after of ErrSpendNotLoaded.
const SpendNotLoadedRetryAfter = 5 * time.Second

// windowName is how a window is named in messages.
func windowName(w quota.Window) string {
	switch w {
	case quota.Day:
		return "daily"
	case quota.Month:
		return "monthly"
	case quota.Total:
	}
	return "total"
}

// spendProblem is the answer to a request refused by its budget (see
// docs/budgets.md, "Refusals"):
//
//   - a day or month budget exhausted: 429 rate_limit_error with
//     retry-after until the window resets (x-should-retry: false: an SDK
//     must not hammer a gateway that will say no until then);
//   - the budget held by requests in flight (it would fit once they
//     settle): 429 with retry-after BudgetPendingRetryAfter, retryable;
//   - the total budget exhausted: 402 (Anthropic billing_error, OpenAI
//     insufficient_quota), a hard cap: no retry helps until the operator
//     raises it;
//   - a request whose worst case alone exceeds a window's budget, or an
//     unpriced model with prices.unknown: refuse: 400
//     invalid_request_error.
func spendProblem(p llm.Protocol, err error, now time.Time) frontdoor.Problem {
	if errors.Is(err, ErrSpendNotLoaded) {
		return frontdoor.Problem{Status: http.StatusServiceUnavailable, RetryAfter: SpendNotLoadedRetryAfter, ShouldRetry: true,
			Message: "this client has a spend budget and the gateway's store is not connected yet, so its spend so far is unknown; retry shortly (clients without a budget are served)"}
	}
	if errors.Is(err, pricing.ErrUnknownModel) {
		return frontdoor.Problem{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: "the gateway has no price for this model and the client has a spend budget: " + err.Error()}
	}
	e, ok := errors.AsType[*quota.ExceededError](err)
	if !ok {
		return frontdoor.Problem{Status: http.StatusInternalServerError, Message: "checking the spend budget: " + err.Error()}
	}
	name := windowName(e.Window)
	switch {
	case e.TooLarge:
		return frontdoor.Problem{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: fmt.Sprintf("this request's worst-case cost of %s (its input estimate plus max_tokens) exceeds the %s budget of %s for client %s: lower max_tokens",
				e.Need, name, e.Limit, e.Client)}
	case e.Pending:
		return frontdoor.Problem{Status: http.StatusTooManyRequests, RetryAfter: BudgetPendingRetryAfter, ShouldRetry: true,
			Message: fmt.Sprintf("the %s budget of %s for client %s is held by requests in flight (%s spent or reserved, this request needs up to %s); retry shortly",
				name, e.Limit, e.Client, e.Used, e.Need)}
	case e.Window == quota.Total:
		typ := "billing_error"
		if p == llm.OpenAI {
			typ = "insufficient_quota"
		}
		return frontdoor.Problem{Status: http.StatusPaymentRequired, Type: typ,
			Message: fmt.Sprintf("the total budget of %s for client %s is exhausted (%s spent or reserved, this request needs up to %s); it does not reset: ask the gateway's operator to raise budget.total",
				e.Limit, e.Client, e.Used, e.Need)}
	}
	wait := max(e.ResetsAt.Sub(now), time.Second)
	return frontdoor.Problem{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: wait,
		Message: fmt.Sprintf("the %s budget of %s for client %s is exhausted (%s spent or reserved, this request needs up to %s); it resets at %s",
			name, e.Limit, e.Client, e.Used, e.Need, e.ResetsAt.UTC().Format(time.RFC3339))}
}
