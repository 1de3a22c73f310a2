package dispatch

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
	"github.com/sluicehq/sluice/internal/provider"
)

// Request is one provider call handed to an upstream's Dispatcher, from the
// proxy handlers, the in-process RoundTripper or a job worker.
type Request struct {
	// Method and Path are sent upstream as they are (e.g. POST /v1/messages).
	Method string
	Path   string
	// Header holds the client's headers to forward, already cleaned of
	// hop-by-hop, credential and Sluice headers by the front door
	// (frontdoor.Build). The dispatcher adds the upstream's own key and the
	// protocol's defaults (provider.SetUpstreamHeaders).
	Header http.Header
	// Body is the request body, kept whole so that retries can replay it.
	Body []byte
	// Priority is the scheduling class.
	Priority llm.Priority
	// Client identifies the caller for fairness inside a class.
	Client string
	// Deadline bounds queueing and all attempts; zero means the class's
	// default max wait.
	Deadline time.Time
	// Cost is the estimate charged against the quota before sending.
	Cost provider.Cost
	// FailFast is set by a caller that has somewhere else to go (a
	// fallback upstream): while the breaker is open or half-open without a
	// probe free, the request is refused at once with ErrUnavailable
	// instead of waiting for the next probe, and an attempt that fails
	// with an overload, a server error or a timeout (a probe's included)
	// ends it with ErrUnavailable instead of a retry after backoff.
	FailFast bool
	// Session names the conversation the request belongs to, for cache
	// affinity: the front door sets it from X-Sluice-Session; "" lets the
	// dispatcher read the body's (Anthropic metadata.user_id, OpenAI
	// prompt_cache_key or user).
	Session string
	// Gate is the caller's own limits on this upstream (a client's rate
	// and concurrency), checked in the admission step; nil for none. See
	// Gate.
	Gate Gate
	// Endpoint is the API the request creates (chat, Responses,
	// embeddings): how its stream is read and whether its answer names a
	// response that only its key can reach again. Set by the front door
	// (frontdoor.Build); the zero value is the chat endpoint.
	Endpoint provider.Endpoint
	// UsageInjected is set by the front door when it asked an OpenAI stream
	// for a usage chunk the caller did not ask for; the front door strips
	// that chunk from the answer (frontdoor.PrepareResponse). The
	// dispatcher ignores it.
	UsageInjected bool
}

// Response is a successful (or terminally failed but passed-through)
// upstream response. Its Body must be closed; closing it reconciles the
// quota with the usage read from the body or stream and frees the
// concurrency slot.
type Response struct {
	*http.Response
	// QueueWait is the whole time the request waited before its
	// successful or final attempt: in the queue, in backoff between
	// attempts and behind an open breaker; the attempts themselves are not
	// counted.
	QueueWait time.Duration
	// Attempts is how many upstream attempts were made (1 = no retry).
	Attempts int
	// Outcome is the call's outcome as of its response headers: Success
	// for a 2xx, else the provider's error (a terminal answer passed
	// through, its body buffered). How a 2xx body ended is told by End.
	Outcome llm.Outcome
	// Protocol is the upstream's protocol.
	Protocol llm.Protocol
	// Upstream names the upstream that answered, and Key the pool's key
	// it was sent with (Fingerprint: never the key itself), for the
	// x-sluice-upstream and x-sluice-key headers.
	Upstream, Key string

	body *trackedBody // nil for a passed-through error answer
}

// End is what the engine read from a response's body once it ended.
type End struct {
	// Outcome is Success for a complete body or a stream that ended with
	// its final event; StreamFail for a stream that carried an error event
	// or stopped before its final event; Transient for a body cut off by a
	// read error. For a passed-through error answer it is Response.Outcome.
	Outcome llm.Outcome
	// Usage is the usage the body or stream reported, valid when HasUsage.
	Usage    llm.Usage
	HasUsage bool
	// Terminal is true for a stream whose last event was its final event
	// (Anthropic message_stop, OpenAI data: [DONE]) or an error event: its
	// reader has been told how it ended. A stream that stopped without
	// either was cut, and a front door adds the error event itself
	// (frontdoor.PrepareResponse). It is true for a body the engine does
	// not read (a passed-through error answer): there is nothing to add.
	Terminal bool
	// Abandoned is true for a stream its reader closed before its end (a
	// client that left): the engine read on to learn the usage the
	// provider bills (Usage, when it came before the drain's bound), and
	// the stream never reached the reader whole.
	Abandoned bool
}

// End returns what the engine read once the Body was read to its end or
// closed; ok is false before. Callers never parse usage or streams again.
func (r *Response) End() (End, bool) {
	if r.body == nil {
		return End{Outcome: r.Outcome, Terminal: true}, true
	}
	return r.body.end()
}

// Ended returns a channel closed once End is known: at once for a body
// the engine does not read, else when the body was read to its end or
// closed and, for a stream its reader left, when the engine has read on
// to its end (or its bound) and settled it.
func (r *Response) Ended() <-chan struct{} {
	if r.body == nil {
		return closedChan
	}
	return r.body.done
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Reasons a Dispatcher gives up without a usable upstream response.
var (
	// ErrTooLarge means the request's cost exceeds a bucket's capacity: it
	// can never be admitted.
	ErrTooLarge = errors.New("request larger than the quota allows")
	// ErrShed means the predicted wait already exceeds the deadline.
	ErrShed = errors.New("request shed: predicted wait exceeds its deadline")
	// ErrDeadline means the deadline passed while queued or retrying.
	ErrDeadline = errors.New("deadline exceeded before the request could complete")
	// ErrRetriesExhausted means every allowed attempt failed retryably.
	ErrRetriesExhausted = errors.New("retries exhausted")
	// ErrRetryBudget means the upstream's retry budget refused a retry.
	ErrRetryBudget = errors.New("retry budget exhausted")
	// ErrStopped means the dispatcher was stopped.
	ErrStopped = errors.New("dispatcher stopped")
	// ErrUnavailable means the upstream is in an outage: its circuit
	// breaker is open and its next probe comes after the request's
	// deadline, or the deadline passed while the breaker held the request.
	// It is answered in the provider's overloaded shape (Anthropic 529
	// overloaded_error, OpenAI 503), as are ErrRetriesExhausted and
	// ErrRetryBudget after overload, server errors or timeouts.
	ErrUnavailable = errors.New("upstream unavailable")
)

// Error is returned when Sluice itself gives up or sheds. The front door
// (frontdoor.ProblemFor, for the proxy, the Transport and the jobs API)
// renders it in the provider's error shape with retry-after,
// retry-after-ms and x-should-retry: false.
type Error struct {
	// Reason is one of the sentinel errors above.
	Reason error
	// Status is the HTTP status to answer with (429, 503, 529, 504, 413...).
	Status int
	// Type is the provider error type to use (rate_limit_error,
	// overloaded_error, api_error, ...), chosen for the upstream's protocol.
	Type string
	// Message explains what happened, for the client.
	Message string
	// RetryAfter is the hint to send back; zero for none.
	RetryAfter time.Duration
	// Attempts is how many upstream attempts were made. QueueWait is the
	// whole time the request waited (in the queue and in backoff) before it
	// was given up, not counting the attempts themselves.
	Attempts  int
	QueueWait time.Duration
	// OutageSince is when the upstream's circuit breaker opened, for an
	// outage (zero otherwise).
	OutageSince time.Time
	// Last is the last upstream outcome, when there was one.
	Last *llm.Outcome
}

// Outcome returns the outcome of the last call that reached the provider;
// ok is false when none did (shed, deadline or stop while queued, a ticket
// given back before sending).
func (e *Error) Outcome() (llm.Outcome, bool) {
	if e.Last == nil {
		return llm.Outcome{}, false
	}
	return *e.Last, true
}

// Outage reports whether the last call that reached the provider failed
// as an outage does (an overload, a server error, a timeout, a broken
// stream): the failures a fallback helps with.
func (e *Error) Outage() bool { return outageKind(e.Last) }

func (e *Error) Error() string {
	return fmt.Sprintf("%v: %s (status %d after %d attempts)", e.Reason, e.Message, e.Status, e.Attempts)
}

func (e *Error) Unwrap() error { return e.Reason }
