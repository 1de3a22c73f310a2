package dispatch

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/llm"
)

// FateKind is what happens to a request (or a job) after one call.
type FateKind int

// The fates.
const (
	// Succeed: the call succeeded; the request is done.
	Succeed FateKind = iota
	// Reschedule: nothing reached the provider (shed, a quota, pause or
	// breaker wait, stopped before sending): try again at At without
	// burning an attempt.
	Reschedule
	// Retry: the call reached the provider and failed retryably: it burns
	// an attempt; try again at At if attempts are left.
	Retry
	// Terminal: the call failed in a way a retry cannot fix (quota, client
	// error, x-should-retry: false, a second rate limit without a hint).
	// It burns an attempt and ends the request.
	Terminal
)

var fateNames = [...]string{"succeed", "reschedule", "retry", "terminal"}

func (k FateKind) String() string {
	if k < 0 || int(k) >= len(fateNames) {
		return fmt.Sprintf("fate(%d)", int(k))
	}
	return fateNames[k]
}

// Burns reports whether a call with this fate counts against the attempt
// budget: every call that reached the provider does.
func (k FateKind) Burns() bool { return k == Retry || k == Terminal }

// Fate is what one call decides: its kind and, for Reschedule and Retry,
// when the next call may start.
type Fate struct {
	Kind FateKind
	At   time.Time
}

// FateParams is what the fate of one call depends on.
type FateParams struct {
	// Sent is false when nothing reached the provider: the fate is then
	// Reschedule at Now+Wait, whatever Outcome says.
	Sent bool
	// Wait is how long an unsent request should wait (Sent false).
	Wait time.Duration
	// Outcome is the call's outcome (Sent true).
	Outcome llm.Outcome
	// Burnt is how many attempts the request burnt before this call; it
	// sets the backoff ceiling.
	Burnt int
	// HintlessRates counts the earlier rate limits the request met that
	// carried no retry hint: a second one is terminal.
	HintlessRates int
	// Backoff is the retry policy.
	Backoff flow.Backoff
	// Now is when the call ended.
	Now time.Time
	// U is a random draw in [0, 1) for the jitter.
	U float64
}

// DecideFate maps one call to its fate. It is the single place where an
// outcome is turned into what happens next, for the in-memory retry loop
// of Dispatcher.Do and for durable jobs alike:
//
//   - nothing sent: Reschedule at Now+Wait (no attempt burnt);
//   - success: Succeed;
//   - quota, client error, x-should-retry: false, or a rate limit without
//     a hint after an earlier one without a hint: Terminal;
//   - rate limit: Retry at the hint (retry-after, or the exhausted
//     bucket's reset) plus a small jitter; without a hint, the backoff
//     ceiling;
//   - overload, transient, stream failure: Retry after a full-jitter
//     backoff, never earlier than the server's hint.
//
// It is pure: time and randomness are passed in.
func DecideFate(p FateParams) Fate {
	b := p.Backoff.WithDefaults()
	if !p.Sent {
		return Fate{Kind: Reschedule, At: p.Now.Add(max(p.Wait, 0))}
	}
	out := p.Outcome
	if out.ShouldRetry != nil && !*out.ShouldRetry && out.Kind != llm.Success {
		return Fate{Kind: Terminal}
	}
	switch out.Kind {
	case llm.Success:
		return Fate{Kind: Succeed}
	case llm.Rate:
		if !out.HasRetryAfter {
			if p.HintlessRates > 0 {
				return Fate{Kind: Terminal}
			}
			return Fate{Kind: Retry, At: p.Now.Add(b.RateDelay(b.Ceiling(p.Burnt), p.U))}
		}
		return Fate{Kind: Retry, At: p.Now.Add(b.RateDelay(out.RetryAfter, p.U))}
	case llm.Overload, llm.Transient, llm.StreamFail:
		delay := b.Delay(p.Burnt, p.U)
		if out.HasRetryAfter {
			delay = max(delay, b.RateDelay(out.RetryAfter, p.U))
		}
		return Fate{Kind: Retry, At: p.Now.Add(delay)}
	default:
		// Quota, client errors and anything unknown can never succeed on
		// retry: terminal, so that it can never loop.
		return Fate{Kind: Terminal}
	}
}
