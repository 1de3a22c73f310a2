package jobsapi

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/frontdoor"
	"github.com/sluicehq/sluice/internal/jobstore"
	"github.com/sluicehq/sluice/internal/llm"
)

// JobView is a job as the API shows it.
type JobView struct {
	ID             int64          `json:"id"`
	Object         string         `json:"object"`
	State          jobstore.State `json:"state"`
	Upstream       string         `json:"upstream"`
	Priority       string         `json:"priority"`
	Client         string         `json:"client,omitempty"`
	Path           string         `json:"path"`
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	BatchID        string         `json:"batch_id,omitempty"`
	CustomID       string         `json:"custom_id,omitempty"`
	RunID          string         `json:"run_id,omitempty"`
	// ServedBy names the upstream whose answer the job ended with: the
	// one that served its result (its own, or a fallback), or the one
	// whose failure it died of; empty while it is live or when no call
	// was made.
	ServedBy    string          `json:"served_by,omitempty"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Stalls      int             `json:"stalls"`
	Deadline    *time.Time      `json:"deadline,omitempty"`
	AvailableAt time.Time       `json:"available_at"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
	WebhookURL  string          `json:"webhook_url,omitempty"`
	Errors      []AttemptView   `json:"errors,omitempty"`
	Request     json.RawMessage `json:"request,omitempty"`
	Response    *ResponseView   `json:"response,omitempty"`
	Error       *ErrorView      `json:"error,omitempty"`
	// WebhookDeliveries are the job's completion webhooks (GET
	// /v1/jobs/{id} only; never in a webhook's own body).
	WebhookDeliveries []DeliveryView `json:"webhook_deliveries,omitempty"`
}

// DeliveryView is one completion webhook of a job: its stable id (the
// webhook-id header of every attempt) and where it stands.
type DeliveryView struct {
	ID string `json:"id"`
	// Event is the state the job finished in (succeeded, dead, canceled),
	// or how a batch ended (batch.completed, batch.failed, batch.expired,
	// batch.cancelled).
	Event    string                 `json:"event"`
	State    jobstore.DeliveryState `json:"state"`
	Attempts int                    `json:"attempts"`
	// LastStatus is the receiver's last HTTP status; LastError why the last
	// attempt failed.
	LastStatus    int        `json:"last_status,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

func deliveryView(d *jobstore.WebhookDelivery) DeliveryView {
	v := DeliveryView{ID: d.ID, Event: cmp.Or(string(d.BatchEvent), string(d.Event)), State: d.State, Attempts: d.Attempts, LastStatus: d.LastStatus,
		LastError: d.LastError, CreatedAt: d.CreatedAt}
	if !d.NextAttemptAt.IsZero() {
		t := d.NextAttemptAt
		v.NextAttemptAt = &t
	}
	if !d.FinishedAt.IsZero() {
		t := d.FinishedAt
		v.FinishedAt = &t
	}
	return v
}

// AttemptView is one failed attempt.
type AttemptView struct {
	Attempt int `json:"attempt"`
	Status  int `json:"status,omitempty"`
	// Kind is the attempt's outcome kind (overload, transient, rate, ...).
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Upstream is where the attempt was sent: the job's own upstream or
	// the fallback its call went to (empty on attempts recorded before
	// it was kept).
	Upstream string    `json:"upstream,omitempty"`
	At       time.Time `json:"at"`
}

// ResponseView is a succeeded job's provider response.
type ResponseView struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the provider's JSON body, or a string for a non-JSON body
	// (an SSE stream).
	Body  any       `json:"body"`
	Usage llm.Usage `json:"usage"`
}

// ErrorView is why a job died.
type ErrorView struct {
	Status  int    `json:"status,omitempty"`
	Type    string `json:"type"`
	Message string `json:"message"`
	// Body is the provider's error body when it answered one.
	Body any `json:"body,omitempty"`
}

// NewJobView renders j as the API shows it (and as its webhooks carry
// it); full adds the request body.
func NewJobView(j *jobstore.Job, full bool) JobView {
	v := JobView{
		ID: j.ID, Object: "job", State: j.State, Upstream: j.Upstream, Priority: j.Priority.String(),
		Client: j.Client, Path: j.Path, IdempotencyKey: j.IdempotencyKey, BatchID: j.BatchID, CustomID: j.CustomID, RunID: j.RunID,
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, Stalls: j.Stalls, AvailableAt: j.AvailableAt,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, WebhookURL: j.WebhookURL,
	}
	if !j.Deadline.IsZero() {
		d := j.Deadline
		v.Deadline = &d
	}
	if !j.FinishedAt.IsZero() {
		f := j.FinishedAt
		v.FinishedAt = &f
	}
	for _, e := range j.Errors {
		v.Errors = append(v.Errors, AttemptView{Attempt: e.Attempt, Status: e.Status, Kind: e.Kind, Message: e.Message,
			Upstream: e.Upstream, At: e.At})
	}
	v.ServedBy = servedBy(j)
	if full && json.Valid(j.Body) {
		v.Request = json.RawMessage(j.Body)
	}
	switch j.State {
	case jobstore.StateSucceeded:
		if j.Result != nil {
			v.Response = &ResponseView{Status: j.Result.Status, Headers: flatHeaders(j.Result.Header), Body: bodyValue(j.Result.Body), Usage: j.Result.Usage}
		}
	case jobstore.StateDead:
		v.Error = deathOf(j)
	case jobstore.StateCanceled:
		v.Error = &ErrorView{Type: "canceled", Message: "the job was canceled"}
	case jobstore.StateQueued, jobstore.StateRunning:
		// Not finished: neither a response nor an error yet.
	}
	return v
}

// servedBy is the upstream whose answer j ended with: the one its kept
// result names, else, for a dead job, the one its last attempt went to.
func servedBy(j *jobstore.Job) string {
	if !j.State.Finished() {
		return ""
	}
	if j.Result != nil {
		if u := j.Result.Header.Get(frontdoor.HeaderUpstream); u != "" {
			return u
		}
	}
	if n := len(j.Errors); j.State == jobstore.StateDead && n > 0 {
		return j.Errors[n-1].Upstream
	}
	return ""
}

// deathOf explains a dead job: the provider's kept error, else the last
// attempt's.
func deathOf(j *jobstore.Job) *ErrorView {
	e := &ErrorView{Type: "api_error", Message: "the job died"}
	if n := len(j.Errors); n > 0 {
		last := j.Errors[n-1]
		e.Status, e.Message = last.Status, last.Message
		kind, err := llm.ParseOutcomeKind(last.Kind)
		if err != nil {
			kind = llm.Transient // an entry the runtime did not write (the rescuer's)
		}
		e.Type = errorTypeOf(kind)
	}
	if expired(j) {
		e.Type = "expired"
	}
	if j.Result != nil {
		e.Status = j.Result.Status
		e.Body = bodyValue(j.Result.Body)
		var env struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(j.Result.Body, &env) == nil && env.Error.Type != "" {
			e.Type, e.Message = env.Error.Type, env.Error.Message
		}
	}
	return e
}

// expired reports whether a dead job died of its deadline.
func expired(j *jobstore.Job) bool {
	return j.State == jobstore.StateDead && !j.Deadline.IsZero() && !j.FinishedAt.Before(j.Deadline) && j.Result == nil
}

func errorTypeOf(c llm.OutcomeKind) string {
	switch c {
	case llm.Rate:
		return "rate_limit_error"
	case llm.Overload:
		return "overloaded_error"
	case llm.Quota:
		return "quota_error"
	case llm.ClientError:
		return "invalid_request_error"
	default:
		// Transient and stream failures (and a success that still failed
		// the job) are the provider's own fault, as in its api_error.
		return "api_error"
	}
}

func bodyValue(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}

func flatHeaders(h http.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if len(v) > 0 {
			out[http.CanonicalHeaderKey(k)] = v[0]
		}
	}
	return out
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }
