package jobstore

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/llm"
)

// State is where a job is in its life.
type State string

// The job states. Queued and running are live; the other three are finished.
const (
	// StateQueued waits for a worker from AvailableAt on.
	StateQueued State = "queued"
	// StateRunning is held by a worker's lease until it expires.
	StateRunning State = "running"
	// StateSucceeded has a Result.
	StateSucceeded State = "succeeded"
	// StateDead ran out of attempts, stalls or deadline, or met a terminal
	// error; it can be requeued.
	StateDead State = "dead"
	// StateCanceled was canceled by a client.
	StateCanceled State = "canceled"
)

// States lists every state, live ones first.
var States = []State{StateQueued, StateRunning, StateSucceeded, StateDead, StateCanceled}

// Finished reports whether s is a final state (succeeded, dead, canceled).
func (s State) Finished() bool {
	return s == StateSucceeded || s == StateDead || s == StateCanceled
}

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case StateQueued, StateRunning, StateSucceeded, StateDead, StateCanceled:
		return true
	}
	return false
}

// ParseState returns the State named s, or an error naming the choices.
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("unknown job state %q (want queued, running, succeeded, dead or canceled)", s)
}

// Job is one durable provider request and everything that happened to it.
type Job struct {
	// ID is assigned by the store, increasing with insertion order.
	ID int64
	// IdempotencyKey is unique among the Client's jobs when set.
	IdempotencyKey string
	// Upstream names the upstream whose dispatcher runs the job.
	Upstream string
	// Priority is the scheduling class (0 critical .. 3 low).
	Priority llm.Priority
	// Client identifies the submitter for fairness and listing.
	Client string
	// Path is the provider path, e.g. /v1/messages.
	Path string
	// Body is the provider request body, stored whole.
	Body []byte
	// Deadline is when the job goes dead if not finished; zero for none.
	Deadline time.Time
	// MaxAttempts bounds the attempts that burn: every provider call made
	// for the job.
	MaxAttempts int
	// Attempts counts the calls that reached the provider: the failed ones
	// that burned (FailRetry, FailTerminal) and the success.
	Attempts int
	// Stalls counts the times a lease expired and the rescuer took it back.
	Stalls int
	// State is the current state.
	State State
	// AvailableAt is when a queued job may be claimed.
	AvailableAt time.Time
	// Lease is set while running (and kept afterwards for inspection).
	Lease Lease
	// Errors is the history of failed attempts, oldest first.
	Errors []AttemptError
	// Result is the provider response once succeeded, or the terminal
	// error response once dead by a terminal error; nil otherwise.
	Result *Result
	// BatchID and CustomID are set for jobs created by CreateBatch;
	// CustomID also for a job of a run that names one (InsertParams).
	BatchID  string
	CustomID string
	// RunID names the run the job was submitted in (InsertParams.RunID):
	// jobs inserted one by one as one whole, listed and canceled together
	// (ListParams.RunID, CancelRun). Empty for none.
	RunID string
	// WebhookURL is called by the runtime when the job finishes; empty for
	// none.
	WebhookURL string
	// CreatedAt, UpdatedAt and FinishedAt (zero while live) are store times
	// taken from the Now of the call that made the change.
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time
}

// Lease is a worker's hold on a running job.
type Lease struct {
	// Token is the fencing token: it increases with every claim of the job.
	Token int64
	// Owner names the worker (free text, for inspection).
	Owner string
	// ExpiresAt is when the rescuer may take the job back.
	ExpiresAt time.Time
}

// AttemptError records one failed attempt.
type AttemptError struct {
	// Attempt is the value of Job.Attempts when the error happened, plus one.
	Attempt int `json:"attempt"`
	// Status is the provider's HTTP status, 0 when there was no response.
	Status int `json:"status"`
	// Kind names the attempt's outcome kind as written by
	// llm.OutcomeKind.String ("rate", "overload", ...); the store keeps it
	// as text and never interprets it.
	Kind string `json:"kind"`
	// Message is the provider's (or Sluice's) error message.
	Message string `json:"message"`
	// RetryAfter is the provider's retry hint, zero for none.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// Upstream names the upstream the attempt was sent to: the job's own,
	// or the fallback its call went to; empty on attempts recorded before
	// it was kept.
	Upstream string `json:"upstream,omitempty"`
	// At is when the attempt failed.
	At time.Time `json:"at"`
}

// Result is a provider response kept with a finished job.
type Result struct {
	// Status is the HTTP status.
	Status int
	// Header holds the response headers worth keeping (request id,
	// content type, rate-limit headers).
	Header http.Header
	// Body is the complete response body.
	Body []byte
	// Usage is the token usage read from the body.
	Usage llm.Usage
}

// FailKind says what a failed attempt does to its job.
type FailKind int

// The ways an attempt can fail.
// The caller decides which applies (the job runtime takes it from the
// engine's fate function); the store only carries it out.
const (
	// FailReschedule requeues at RetryAt without burning an attempt:
	// nothing reached the provider.
	FailReschedule FailKind = iota
	// FailRetry burns an attempt and requeues at RetryAt, or goes dead
	// when attempts are exhausted.
	FailRetry
	// FailTerminal burns an attempt and goes dead at once, keeping the
	// provider's error response as the Result.
	FailTerminal
)

func (k FailKind) String() string {
	switch k {
	case FailReschedule:
		return "reschedule"
	case FailRetry:
		return "retry"
	case FailTerminal:
		return "terminal"
	}
	return fmt.Sprintf("failkind(%d)", int(k))
}

// Unrecorded reports whether e is empty (no kind, status or message): a
// FailReschedule with it adds nothing to the history.
func (e AttemptError) Unrecorded() bool { return e.Kind == "" && e.Message == "" && e.Status == 0 }
